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
}
