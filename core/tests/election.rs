//! Elections in process: campaigners lead one at a time, in line, each
//! term's fence above the last; a lost leadership's signal fires before
//! the next leads; observers see the present leader, then the changes;
//! threads and tasks campaign in one line.

mod common;

use common::{assert_fails_with, revoking_lock, store_with};
use holdline::{Leader, Store};
use std::sync::mpsc;
use std::time::Duration;

/// Far above what a loaded machine needs: only a hang trips it.
const PATIENCE: Duration = Duration::from_secs(30);

fn leader(note: &str, fence: u64) -> (String, u64) {
    (note.to_owned(), fence)
}

fn shown(l: Option<Leader>) -> Option<(String, u64)> {
    l.map(|l| (l.note, l.fence))
}

#[test]
fn campaigners_lead_one_at_a_time_in_line_with_rising_fences() {
    let (_store, jobs) = store_with("jobs");
    let election = jobs.election("nightly");
    let mut observer = election.observe();
    assert_eq!(observer.next_timeout(PATIENCE), Some(None));
    let first = election.campaign("a:1").unwrap();
    let got = observer.next_timeout(PATIENCE).unwrap();
    assert_eq!(shown(got), Some(leader("a:1", first.fence())));

    // A second campaigner waits in line until the first resigns.
    let (tx, rx) = mpsc::channel();
    let other = jobs.election("nightly");
    let second = std::thread::spawn(move || {
        let lead = other.campaign("b:1").unwrap();
        tx.send(lead.fence()).unwrap();
        lead
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "b led while a did"
    );
    first.proclaim("a:2").unwrap();
    let got = observer.next_timeout(PATIENCE).unwrap();
    assert_eq!(shown(got), Some(leader("a:2", first.fence())));
    let first_fence = first.fence();
    first.resign().unwrap();
    let second_fence = rx.recv_timeout(PATIENCE).unwrap();
    assert!(second_fence > first_fence);
    let lead = second.join().unwrap();
    assert_eq!(shown(election.leader()), Some(leader("b:1", second_fence)));
    // The observer never goes back: the end of a's term, then b's.
    let mut fences = Vec::new();
    while let Some(seen) = observer.next_timeout(Duration::from_millis(100)) {
        fences.push(seen.map(|l| l.fence));
    }
    assert_eq!(fences.last(), Some(&Some(second_fence)), "{fences:?}");
    drop(lead);
    assert_eq!(election.leader(), None, "a dropped leadership resigns");
}

#[test]
fn a_lost_leadership_fires_before_the_next_campaigner_leads() {
    let store = Store::new();
    let lock = revoking_lock(&store, "jobs", 100);
    let election = lock.election("nightly");
    let first = election.campaign("a").unwrap();
    let signal = first.signal();
    let other = lock.election("nightly");
    let second = std::thread::spawn(move || other.campaign("b").unwrap());
    let lead = second.join().unwrap();
    // b leads only after a's term was lost, and a was told.
    assert!(signal.is_aborted() && first.is_lost());
    assert!(lead.fence() > first.fence());
    assert_fails_with(
        first.proclaim("still here"),
        "lock jobs: key \"nightly\": the lease was lost: it was revoked at its maxHold",
    );
    assert_eq!(shown(election.leader()), Some(leader("b", lead.fence())));
    let err = first.resign().unwrap_err();
    assert_eq!(err.kind(), holdline::ErrorKind::Lost);
}

#[test]
fn an_observer_is_told_when_the_leader_is_lost_with_nobody_in_line() {
    let store = Store::new();
    let lock = revoking_lock(&store, "jobs", 50);
    let election = lock.election("nightly");
    let mut observer = election.observe();
    assert_eq!(observer.next_timeout(PATIENCE), Some(None));
    let lead = election.campaign("a").unwrap();
    assert_eq!(
        shown(observer.next_timeout(PATIENCE).unwrap()),
        Some(leader("a", lead.fence()))
    );
    // Revoked at its maxHold: the loss wakes the observer, with no poll.
    assert_eq!(observer.next_timeout(PATIENCE), Some(None));
    assert!(lead.is_lost());
    assert_eq!(election.leader(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_threads_campaign_in_one_line() {
    let (_store, lock) = store_with("jobs");
    let election = lock.election("nightly");
    let mut observer = election.observe();
    assert_eq!(observer.next().await, None);
    let thread_lead = election.campaign("thread").unwrap();
    // A task campaigns behind the thread; a campaign dropped leaves the line.
    let dropped = lock.election("nightly");
    let gone = tokio::time::timeout(Duration::from_millis(50), dropped.campaign_async("gone"));
    assert!(gone.await.is_err());
    assert_eq!(waiters(&lock), 0);
    let other = lock.election("nightly");
    let task = tokio::spawn(async move { other.campaign_async("task").await.unwrap() });
    assert_eq!(
        shown(observer.next().await),
        Some(leader("thread", thread_lead.fence()))
    );
    while waiters(&lock) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let thread_fence = thread_lead.fence();
    thread_lead.resign().unwrap();
    let task_lead = tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
    assert!(task_lead.fence() > thread_fence);
    let mut last = None;
    while let Ok(seen) = tokio::time::timeout(Duration::from_millis(100), observer.next()).await {
        last = Some(shown(seen));
    }
    assert_eq!(last, Some(Some(leader("task", task_lead.fence()))));
}

fn waiters(lock: &holdline::Lock) -> usize {
    lock.inspect("nightly").map_or(0, |info| info.waiters)
}
