//! What `/proc` tells about a server the harness started: the CPU time of
//! it and every process under it (PostgreSQL's postmaster and its
//! backends), their memory, and whether this process runs as root.

use std::collections::HashMap;

/// Clock ticks per second, the unit of `/proc/PID/stat`'s CPU times
/// (`sysconf(_SC_CLK_TCK)`: 100 on Linux).
pub fn ticks_per_sec() -> u64 {
    // SAFETY: sysconf only reads a configuration value; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(100)
}

/// Whether this process runs as root (PostgreSQL refuses to).
pub fn is_root() -> bool {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// One line of `/proc/PID/stat`: the parent's pid, and user + system CPU
/// ticks of the process itself (`utime`, `stime`) plus those of the
/// children it has waited for (`cutime`, `cstime`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    pub ticks: u64,
}

/// Parses a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself: the fields
/// after it are counted from its last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    // After the name: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    let ticks = at(14)? + at(15)? + at(16)? + at(17)?;
    Some(Stat {
        ppid: u32::try_from(at(4)?).ok()?,
        ticks,
    })
}

fn stat_of(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process now running, by pid, with its [`Stat`].
fn all_stats() -> HashMap<u32, Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat_of(pid)?)))
        .collect()
}

/// `root` and every process below it, from `stats`.
fn tree(root: u32, stats: &HashMap<u32, Stat>) -> Vec<u32> {
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            stats
                .iter()
                .filter(|(_, s)| s.ppid == parent)
                .map(|(&pid, _)| pid),
        );
        i += 1;
    }
    found
}

/// The CPU ticks (user + system) that `pid` and every process below it
/// have used, those that exited and were waited for included (they are
/// in their parent's `cutime`/`cstime`, and no longer counted apart):
/// `None` when `pid` is gone.
pub fn tree_cpu_ticks(pid: u32) -> Option<u64> {
    let stats = all_stats();
    stats.get(&pid)?;
    Some(tree(pid, &stats).iter().map(|p| stats[p].ticks).sum())
}

/// The proportional set size (`Pss` of `/proc/PID/smaps_rollup`, shared
/// pages split among their users) of `pid` and every process below it,
/// in bytes: what a process per connection really costs, its shared
/// memory counted once.
pub fn tree_pss(pid: u32) -> Option<i64> {
    let stats = all_stats();
    stats.get(&pid)?;
    let pss = |p: &u32| -> Option<i64> {
        let text = std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok()?;
        let line = text.lines().find(|l| l.starts_with("Pss:"))?;
        line["Pss:".len()..]
            .split_whitespace()
            .next()?
            .parse::<i64>()
            .ok()
    };
    Some(tree(pid, &stats).iter().filter_map(pss).sum::<i64>() * 1024)
}

/// Context switches of `pid` and every process below it, summed over
/// each one's threads (`voluntary_ctxt_switches` and
/// `nonvoluntary_ctxt_switches` of `/proc/PID/task/*/status`): a thread
/// that blocks (a futex, an empty `epoll_wait`) switches voluntarily.
/// `None` when `pid` is gone. Threads that ended are not counted.
pub fn tree_ctx_switches(pid: u32) -> Option<CtxSwitches> {
    let stats = all_stats();
    stats.get(&pid)?;
    let mut sum = CtxSwitches::default();
    for p in tree(pid, &stats) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let path = task.path().join("status");
            if let Ok(text) = std::fs::read_to_string(path) {
                sum = sum + CtxSwitches::of_status(&text);
            }
        }
    }
    Some(sum)
}

/// Voluntary and involuntary context switches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxSwitches {
    pub voluntary: u64,
    pub involuntary: u64,
}

impl CtxSwitches {
    /// Read off a `/proc/PID/status` text.
    fn of_status(text: &str) -> CtxSwitches {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        CtxSwitches {
            voluntary: field("voluntary_ctxt_switches:"),
            involuntary: field("nonvoluntary_ctxt_switches:"),
        }
    }

    /// Those since `earlier`.
    pub fn since(self, earlier: CtxSwitches) -> CtxSwitches {
        CtxSwitches {
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }
}

impl std::ops::Add for CtxSwitches {
    type Output = CtxSwitches;
    fn add(self, o: CtxSwitches) -> CtxSwitches {
        CtxSwitches {
            voluntary: self.voluntary + o.voluntary,
            involuntary: self.involuntary + o.involuntary,
        }
    }
}

/// The system calls a process tree made while `strace -c -f` was
/// attached to it, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Syscalls {
    /// `epoll_wait`, `epoll_pwait`, `epoll_pwait2` (and `poll`, `select`).
    pub waits: u64,
    /// `read`, `recvfrom`, `recvmsg`, `readv`.
    pub reads: u64,
    /// `write`, `sendto`, `sendmsg`, `writev`.
    pub writes: u64,
    pub futex: u64,
    /// Every call, these and the rest.
    pub total: u64,
}

impl Syscalls {
    /// Parses `strace -c`'s summary table (`% time seconds usecs/call
    /// calls [errors] syscall` rows, a `total` row at the end).
    pub fn parse(summary: &str) -> Syscalls {
        let mut out = Syscalls::default();
        for line in summary.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(name), Some(calls)) = (f.last(), f.get(3)) else {
                continue;
            };
            let Ok(calls) = calls.parse::<u64>() else {
                continue;
            };
            if f.len() < 5 || f[0].parse::<f64>().is_err() || *name == "total" {
                continue;
            }
            out.total += calls;
            match *name {
                "epoll_wait" | "epoll_pwait" | "epoll_pwait2" | "poll" | "ppoll" | "select"
                | "pselect6" => out.waits += calls,
                "read" | "recvfrom" | "recvmsg" | "readv" => out.reads += calls,
                "write" | "sendto" | "sendmsg" | "writev" => out.writes += calls,
                "futex" => out.futex += calls,
                _ => {}
            }
        }
        out
    }
}

/// `strace -c -f` attached to a process tree, counting its system calls
/// until [`stop`](Strace::stop).
pub struct Strace {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl Strace {
    /// Attaches to `pid` and every process below it (their threads too);
    /// `Err` says how to get strace when it is missing. Waits a moment
    /// for the attach to be done.
    pub fn attach(pid: u32) -> Result<Strace, &'static str> {
        const HOW: &str = "n/a (install strace)";
        let stats = all_stats();
        stats.get(&pid).ok_or("n/a (server gone)")?;
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let out = std::env::temp_dir().join(format!(
            "harness-strace-{}-{}.txt",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut cmd = std::process::Command::new("strace");
        cmd.args(["-c", "-f", "-qq", "-o"]).arg(&out);
        for p in tree(pid, &stats) {
            cmd.arg("-p").arg(p.to_string());
        }
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = cmd.spawn().map_err(|_| HOW)?;
        std::thread::sleep(std::time::Duration::from_millis(300));
        Ok(Strace { child, out })
    }

    /// Detaches (SIGINT: strace writes its summary) and answers the counts.
    pub fn stop(mut self) -> Option<Syscalls> {
        let pid = libc::pid_t::try_from(self.child.id()).ok()?;
        // SAFETY: kill takes no pointers; `pid` is our own child, not yet waited for.
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
        let status = self.child.wait().ok()?;
        let text = std::fs::read_to_string(&self.out).ok();
        let _ = std::fs::remove_file(&self.out);
        let counts = Syscalls::parse(&text?);
        (status.success() || counts.total > 0).then_some(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_name_with_spaces_and_parentheses() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 30 7 3 20 0 5 0 1000 1000000 100 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                ppid: 17,
                ticks: 250 + 30 + 7 + 3
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_has_a_clock_and_a_tree_that_used_cpu() {
        assert_eq!(ticks_per_sec(), 100);
        let me = std::process::id();
        let mut x = 0u64;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        assert!(tree_cpu_ticks(me).unwrap() >= 1);
        assert!(tree_pss(me).unwrap() > 100 << 10);
        // A child shows in its parent's tree.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let stats = all_stats();
        assert!(tree(me, &stats).contains(&child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(tree_cpu_ticks(u32::MAX), None);
    }

    #[test]
    fn an_strace_summary_is_counted_by_kind() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
 60.00    0.006000           3      2000           sendto\n\
 20.00    0.002000           1      2010        10 recvfrom\n\
 10.00    0.001000           1       500           epoll_wait\n\
  5.00    0.000500           2       100        20 futex\n\
  5.00    0.000500           2         7           getrandom\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.010000           2      4617        30 total\n";
        let s = Syscalls::parse(text);
        assert_eq!(
            s,
            Syscalls {
                waits: 500,
                reads: 2010,
                writes: 2000,
                futex: 100,
                total: 4617
            }
        );
    }

    #[test]
    fn this_process_has_context_switches() {
        std::thread::sleep(std::time::Duration::from_millis(2));
        let c = tree_ctx_switches(std::process::id()).unwrap();
        assert!(c.voluntary >= 1);
    }
}
