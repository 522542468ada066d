//! Sends a scenario to its family's runner. Every runner is generic over
//! the design, so the measured loops are monomorphised per design.

use crate::async_scenarios as a;
use crate::designs::{AsyncKeyedLock, KeyedLock};
use crate::measure::base_run;
use crate::row::Run;
use crate::scenario::{Cfg, Kind, Scenario};
use crate::{deadline, fresh_keys, handoff, rates};

impl Scenario {
    /// One run of this scenario with design `D`.
    pub fn run<D: KeyedLock>(self, cfg: &Cfg, threads: usize) -> Run {
        match self {
            Scenario::Uncontended => rates::uncontended::<D>(cfg, threads),
            Scenario::HotKey => rates::hot_key::<D>(cfg, threads),
            Scenario::Zipf => rates::zipf::<D>(cfg, threads),
            Scenario::MillionKeys => fresh_keys::million_keys::<D>(cfg, threads),
            Scenario::Handoff => handoff::handoff::<D>(cfg),
            Scenario::Deadline => deadline::deadline::<D>(cfg),
            // Reached for the designs without an async hold (bench sends the
            // others to `run_async`) and never for a server scenario.
            _ => {
                let mut run = base_run::<D>(self, threads);
                run.na = Some(match self.kind() {
                    Kind::Server | Kind::Cluster => "a server scenario",
                    Kind::Permits => "a permits scenario",
                    _ => "no async hold",
                });
                run
            }
        }
    }

    /// One run of this async scenario with design `D`; a blocking or server
    /// scenario is answered by [`Scenario::run`].
    pub fn run_async<D: AsyncKeyedLock>(self, cfg: &Cfg, tasks: usize) -> Run {
        match self {
            Scenario::AsyncUncontended => a::uncontended::<D>(cfg, tasks),
            Scenario::AsyncHotKey => a::hot_key::<D>(cfg, tasks),
            Scenario::AsyncFreshKeys => a::fresh_keys::<D>(cfg, tasks),
            Scenario::AsyncDeadline => a::deadline::<D>(cfg),
            _ => self.run::<D>(cfg, tasks),
        }
    }

    /// The run of a design whose run panicked.
    pub fn failed<D: KeyedLock>(self, threads: usize) -> Run {
        let mut run = base_run::<D>(self, threads);
        run.na = Some("PANICKED");
        run.note = "the run panicked (see stderr)".into();
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;
    use std::time::Duration;

    #[test]
    fn a_scenarios_flag_name_is_its_table_name() {
        for s in Scenario::ALL {
            let flag = s.to_possible_value().expect("not skipped");
            assert_eq!(flag.get_name(), s.name());
        }
        assert_eq!(Scenario::ALL.len(), Scenario::value_variants().len());
    }

    #[test]
    fn legends_carry_the_configuration() {
        let mut cfg = Cfg::new(Duration::from_millis(5), 1234);
        cfg.handoff_linger = Duration::from_micros(7);
        cfg.dl_wait = Duration::from_millis(3);
        assert!(Scenario::MillionKeys
            .legend(&cfg)
            .starts_with("1234 distinct"));
        assert!(Scenario::Handoff
            .legend(&cfg)
            .contains("lets go 7.0us after"));
        assert!(Scenario::Deadline
            .legend(&cfg)
            .contains("with a 3.00ms deadline"));
    }

    #[test]
    fn every_design_runs_every_scenario_briefly() {
        let mut cfg = Cfg::new(Duration::from_millis(5), 1000);
        cfg.dl_hold = Duration::from_millis(2);
        for d in crate::designs::Design::ALL {
            for s in Scenario::ALL
                .into_iter()
                .filter(|s| s.kind() == Kind::Blocking)
            {
                let run = crate::for_design!(d, D => s.run::<D>(&cfg, 2));
                assert_eq!((run.design, run.scenario), (d.name(), s));
                if run.na.is_none() {
                    assert!(run.secs > 0.0, "{s:?} {d:?}");
                    // A deadline row's holds may all miss their 2 ms
                    // deadline in its 5 ms on a loaded machine: it ran,
                    // which is what this test asks; every other row
                    // completes holds whatever the load.
                    assert!(run.ops > 0 || s == Scenario::Deadline, "{s:?} {d:?}");
                }
            }
        }
    }

    #[test]
    fn async_scenarios_run_on_the_async_designs_and_are_na_on_the_others() {
        let mut cfg = Cfg::new(Duration::from_millis(5), 1000);
        cfg.dl_hold = Duration::from_millis(2);
        let asyncs = Scenario::ALL
            .into_iter()
            .filter(|s| s.kind() == Kind::Async);
        for s in asyncs {
            let tasks = s.fixed_threads().map_or(2, |t| t[0]);
            for d in crate::designs::Design::ALL {
                let run = crate::for_async_design!(d, D => s.run_async::<D>(&cfg, tasks),
                    else crate::for_design!(d, D => s.run::<D>(&cfg, tasks)));
                assert_eq!((run.design, run.scenario), (d.name(), s));
                if d.has_async() {
                    assert_eq!(run.na, None, "{s:?} {d:?}");
                    assert!(run.secs > 0.0 && run.ops > 0, "{s:?} {d:?}");
                    assert!(run.p99 > 0, "{s:?} {d:?}: no latency recorded");
                } else {
                    assert_eq!(run.na, Some("no async hold"), "{s:?} {d:?}");
                }
            }
        }
    }

    #[test]
    fn async_fresh_keys_gives_holdlines_memory_back_and_tokios_map_keeps_it() {
        let cfg = Cfg::new(Duration::from_millis(5), 20_000);
        let hl = Scenario::AsyncFreshKeys.run_async::<crate::designs::Holdline>(&cfg, 2);
        let tk = Scenario::AsyncFreshKeys.run_async::<crate::designs::DashTokio>(&cfg, 2);
        assert_eq!(hl.ops, 20_000);
        // 20,000 entries of a map of Arc<Mutex> are well over 200 KiB.
        assert!(tk.mem_idle.unwrap() > 200 << 10, "{:?}", tk.mem_idle);
        assert!(
            hl.mem_settled.unwrap() < tk.mem_idle.unwrap() / 4,
            "holdline kept {:?} bytes of 20,000 idle keys, tokio's map {:?}",
            hl.mem_settled,
            tk.mem_idle
        );
    }

    #[test]
    fn async_deadline_waits_time_out_late_never_early() {
        let mut cfg = Cfg::new(Duration::from_millis(100), 10);
        cfg.dl_hold = Duration::from_millis(20);
        for run in [
            Scenario::AsyncDeadline.run_async::<crate::designs::Holdline>(&cfg, 4),
            Scenario::AsyncDeadline.run_async::<crate::designs::DashTokio>(&cfg, 4),
        ] {
            assert!(run.ops > 0, "{}: {}", run.design, run.note);
            assert!(
                run.note.contains("(0 early)"),
                "{}: {}",
                run.design,
                run.note
            );
        }
    }

    #[test]
    fn async_hot_key_counts_grants_in_order_for_fifo_designs() {
        let cfg = Cfg::new(Duration::from_millis(20), 10);
        let run = Scenario::AsyncHotKey.run_async::<crate::designs::Holdline>(&cfg, 4);
        let (ooo, grants) = run.out_of_order.expect("hot key samples order");
        assert!(grants > 0 && ooo <= grants, "{ooo}/{grants}");
    }
}
