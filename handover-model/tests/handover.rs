//! The hand-over model checked exhaustively, and each mutant shown to
//! break the property it names.

use std::collections::BTreeSet;
use std::time::Instant;

use handover_model::{Handover, Mutant, FALLBACK_GRANT, REATTACHED};
use stateright::{Checker, HasDiscoveries, Model};

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn the_hand_over_keeps_every_property() {
    let start = Instant::now();
    let checker = Handover::default()
        .checker()
        .threads(threads())
        .spawn_bfs()
        .join();
    eprintln!(
        "hand-over: {} states ({} unique), depth {}, in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        start.elapsed()
    );
    // Every `always` holds in every state, and the paths that give the
    // properties their teeth (a re-attach, a fallback grant) are reached.
    checker.assert_properties();
    assert!(checker.discovery(REATTACHED).is_some());
    assert!(checker.discovery(FALLBACK_GRANT).is_some());
}

/// Checks `mutant` until the property it breaks has a counterexample
/// (or every state was seen), and prints that counterexample's actions.
fn counterexample(mutant: Mutant) {
    let start = Instant::now();
    let name = mutant.breaks();
    let checker = Handover::with(mutant)
        .checker()
        .threads(threads())
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([name])))
        .spawn_bfs()
        .join();
    let Some(path) = checker.discovery(name) else {
        panic!("{mutant:?}: no counterexample to \"{name}\"");
    };
    let actions = path.into_actions();
    eprintln!(
        "{mutant:?} breaks \"{name}\" in {} steps ({} states, {:.1?}): {actions:?}",
        actions.len(),
        checker.state_count(),
        start.elapsed()
    );
}

#[test]
fn export_before_freeze_makes_two_believers() {
    counterexample(Mutant::ExportBeforeFreeze);
}

#[test]
fn reattach_without_secret_makes_two_believers() {
    counterexample(Mutant::ReattachWithoutSecret);
}

#[test]
fn no_fallback_wait_makes_two_believers() {
    counterexample(Mutant::NoFallbackWait);
}

#[test]
fn import_forgetting_max_hold_outlives_it() {
    counterexample(Mutant::ImportForgetsMaxHold);
}

#[test]
fn import_reusing_a_fence_makes_fences_fall() {
    counterexample(Mutant::ImportReusesFence);
}

#[test]
fn an_orphan_never_ending_breaks_imports_end() {
    counterexample(Mutant::OrphanNeverEnds);
}

#[test]
fn a_stale_import_makes_two_believers() {
    counterexample(Mutant::StaleImport);
}

#[test]
fn giving_up_before_the_freeze_makes_two_believers() {
    counterexample(Mutant::GiveUpBeforeFreeze);
}
