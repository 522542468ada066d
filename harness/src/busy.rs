//! `--busy N`: CPU-bound threads spinning beside a row, as other programs on
//! a busy machine would. They run from [`Spinners::start`] until the value
//! is dropped.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Threads that only compute (no syscalls, no sleeping) until dropped.
pub struct Spinners {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Spinners {
    /// Starts `n` spinning threads (none for 0).
    pub fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let threads = (0..n)
            .map(|i| {
                let (stop, rounds) = (stop.clone(), rounds.clone());
                std::thread::Builder::new()
                    .name(format!("busy-{i}"))
                    .spawn(move || {
                        let mut x = i as u64 | 1;
                        while !stop.load(Relaxed) {
                            for _ in 0..4096 {
                                // xorshift: work the optimiser cannot drop.
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                x = black_box(x);
                            }
                            rounds.fetch_add(1, Relaxed);
                        }
                    })
                    .expect("spawn a busy thread")
            })
            .collect();
        Spinners {
            stop,
            rounds,
            threads,
        }
    }

    /// Rounds of work done so far, by all spinners together.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Relaxed)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn spinners_work_until_dropped() {
        let s = Spinners::start(2);
        let deadline = Instant::now() + Duration::from_secs(30);
        while s.rounds() < 10 {
            assert!(Instant::now() < deadline, "the spinners did no work");
            std::thread::sleep(Duration::from_millis(1));
        }
        let rounds = s.rounds.clone();
        drop(s);
        // Dropping joined them: no round is counted after.
        let after = rounds.load(Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(rounds.load(Relaxed), after);
    }

    #[test]
    fn zero_spinners_is_no_thread() {
        assert!(Spinners::start(0).threads.is_empty());
    }
}
