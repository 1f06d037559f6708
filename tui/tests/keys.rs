//! Key handling through `App::on_key`, as a person presses keys: no terminal needed.
use std::time::Duration;

use ppscope::snapshot::{DevmemView, PoolView, Snapshot};
use ppscope_tui::{
    keys::{Key, KEYS},
    App, Pane, INTERVALS_MS,
};
use ratatui::{backend::TestBackend, buffer::Buffer, Terminal};

/// `n` pools named dev{i} q0; pool i has i × 100 slow calls per second (the last is the worst).
fn snap(n: u64) -> Snapshot {
    let pools = (0..n)
        .map(|i| {
            let mut p = PoolView::unprobed(0, None, None);
            p.pool = format!("{:#x}", 0x1000 + i);
            p.ifname = Some(format!("dev{i:02}"));
            p.queue = Some(0);
            p.alloc.ring = Some(10_000);
            p.alloc.slow = Some(i * 100);
            p.alloc.total = Some(20_000 + i);
            p.alloc.cache = Some(10_000 + i - i * 100);
            p.ring_hit_rate = Some(10_000.0 / (10_000 + i * 100) as f64);
            p
        })
        .collect();
    Snapshot::with_pools("k", 1.0, pools)
}

fn press(app: &mut App, keys: &[Key]) -> bool {
    keys.iter().any(|k| app.on_key(k.to_event()))
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        app.on_key(Key::Char(c).to_event());
    }
}

fn app(n: u64) -> App {
    let mut a = App::new("test", Duration::from_secs(1));
    a.on_snapshot(snap(n));
    a
}

fn buffer(app: &App) -> Buffer {
    let mut t = Terminal::new(TestBackend::new(120, 40)).unwrap();
    t.draw(|f| ppscope_tui::render(f, app)).unwrap();
    t.backend().buffer().clone()
}

#[test]
fn worst_pool_first_by_default_and_sort_changes_order() {
    let mut a = app(5);
    assert_eq!(
        a.visible()[0],
        "dev04 q0",
        "the most slow-path traffic first"
    );
    press(&mut a, &[Key::Char('s')]); // by pool label
    assert_eq!(
        a.visible(),
        ["dev00 q0", "dev01 q0", "dev02 q0", "dev03 q0", "dev04 q0"]
    );
    press(&mut a, &[Key::Char('r')]);
    assert_eq!(a.visible()[0], "dev04 q0");
    // Every sort key yields every pool exactly once.
    for _ in 0..20 {
        press(&mut a, &[Key::Char('s')]);
        let mut v: Vec<_> = a.visible().into_iter().map(String::from).collect();
        v.sort();
        assert_eq!(v.len(), 5);
        v.dedup();
        assert_eq!(v.len(), 5);
    }
}

#[test]
fn filter_narrows_rows_enter_keeps_esc_clears() {
    let mut a = app(12);
    press(&mut a, &[Key::Char('/')]);
    typed(&mut a, "dev1");
    assert_eq!(a.visible().len(), 2, "{:?}", a.visible());
    press(&mut a, &[Key::Enter]);
    // Keys act again (q would quit, s sorts) and the filter stays.
    press(&mut a, &[Key::Char('s')]);
    assert_eq!(a.visible(), ["dev10 q0", "dev11 q0"]);
    // Esc clears the filter first, then (nothing open) quits.
    assert!(!press(&mut a, &[Key::Esc]));
    assert_eq!(a.visible().len(), 12);
    assert!(press(&mut a, &[Key::Esc]));
    // While typing, Esc clears and q is text.
    press(&mut a, &[Key::Char('/')]);
    typed(&mut a, "q");
    assert!(!press(&mut a, &[Key::Esc]));
    assert_eq!(a.visible().len(), 12);
}

#[test]
fn selection_moves_and_follows_its_pool() {
    let mut a = app(5);
    let first = a.selected();
    press(&mut a, &[Key::Char('j')]);
    let picked = a.selected().unwrap();
    assert_ne!(Some(picked), first);
    let name = a.snapshot().unwrap().pools[picked].pool.clone();
    press(&mut a, &[Key::Down, Key::Up]);
    assert_eq!(a.selected(), Some(picked));
    // A new snapshot in another order: the selection stays on the same pool.
    let mut s = snap(5);
    s.pools.reverse();
    a.on_snapshot(s);
    let now = a.selected().unwrap();
    assert_eq!(a.snapshot().unwrap().pools[now].pool, name);
    // Past the ends it stops: on the last row, then on the first.
    let label = |a: &App| {
        let i = a.selected().unwrap();
        a.snapshot().unwrap().pools[i].label()
    };
    press(&mut a, &[Key::End]);
    let last = a.visible().last().unwrap().to_string();
    assert_eq!(label(&a), last, "End selects the last row");
    press(&mut a, &[Key::Down, Key::Down]);
    assert_eq!(label(&a), last, "Down past the last row stays");
    for _ in 0..10 {
        press(&mut a, &[Key::Up]);
    }
    let first_row = a.visible().first().unwrap().to_string();
    assert_eq!(label(&a), first_row, "Up past the first row stays");
    assert_eq!(a.visible().len(), 5);
    // Home goes back to following the worst pool.
    press(&mut a, &[Key::Home]);
    let i = a.selected().unwrap();
    assert_eq!(
        a.snapshot().unwrap().pools[i].ifname.as_deref(),
        Some("dev04")
    );
}

#[test]
fn tab_switches_panes_and_devmem_gve_is_a_pane_only_when_present() {
    let mut a = app(3);
    assert_eq!(a.focus(), Pane::Pools);
    press(&mut a, &[Key::Tab]);
    assert_eq!(a.focus(), Pane::Detail);
    press(&mut a, &[Key::Tab]);
    assert_eq!(a.focus(), Pane::Pools);
    let mut s = snap(3);
    s.devmem = Some(DevmemView::default());
    a.on_snapshot(s);
    press(&mut a, &[Key::Tab, Key::Tab]);
    assert_eq!(a.focus(), Pane::System);
    press(&mut a, &[Key::BackTab]);
    assert_eq!(a.focus(), Pane::Detail);
}

#[test]
fn pause_keeps_the_frame() {
    let mut a = app(3);
    press(&mut a, &[Key::Char(' ')]);
    let paused = buffer(&a);
    a.on_snapshot(snap(7));
    assert_eq!(buffer(&a), paused, "a paused dashboard does not change");
    press(&mut a, &[Key::Char(' ')]);
    assert_eq!(a.visible().len(), 7, "resuming shows what arrived");
}

#[test]
fn interval_changes_within_bounds() {
    let mut a = app(1);
    press(&mut a, &[Key::Char('+')]);
    assert_eq!(a.interval(), Duration::from_secs(2));
    press(&mut a, &[Key::Char('-'), Key::Char('-')]);
    assert_eq!(a.interval(), Duration::from_millis(500));
    for _ in 0..20 {
        press(&mut a, &[Key::Char('-')]);
    }
    assert_eq!(a.interval(), Duration::from_millis(INTERVALS_MS[0]));
    for _ in 0..20 {
        press(&mut a, &[Key::Char('+')]);
    }
    assert_eq!(
        a.interval(),
        Duration::from_millis(*INTERVALS_MS.last().unwrap())
    );
    // An interval from the command line off the ladder steps to its neighbours.
    let mut b = App::new("t", Duration::from_millis(750));
    press(&mut b, &[Key::Char('+')]);
    assert_eq!(b.interval(), Duration::from_secs(1));
}

#[test]
fn quit_keys() {
    for k in [Key::Char('q'), Key::Ctrl('c')] {
        assert!(press(&mut app(2), &[k]));
    }
    // Esc closes the help before it quits.
    let mut a = app(2);
    press(&mut a, &[Key::Char('?')]);
    assert!(a.help_shown());
    assert!(!press(&mut a, &[Key::Esc]));
    assert!(!a.help_shown());
}

/// Every key the help lists does something a person can see (or quits).
#[test]
fn every_key_in_the_help_table_has_an_effect() {
    let setup = || {
        let mut a = app(30);
        let mut s = snap(30);
        s.devmem = Some(DevmemView::default());
        a.on_snapshot(s);
        for _ in 0..12 {
            a.on_key(Key::Down.to_event());
        }
        a
    };
    for b in KEYS {
        for k in b.keys {
            let mut a = setup();
            let before = buffer(&a);
            let quit = a.on_key(k.to_event());
            assert!(
                quit || buffer(&a) != before,
                "{:?} ({}) changed nothing on screen",
                k,
                b.help
            );
        }
    }
}

#[test]
fn empty_and_tiny_never_panic_under_any_key() {
    let mut a = App::new("t", Duration::from_secs(1));
    a.on_snapshot(Snapshot::with_pools("k", 0.0, vec![]));
    for b in KEYS {
        for k in b.keys {
            if !a.on_key(k.to_event()) {
                for (w, h) in [(1, 1), (40, 10), (80, 24)] {
                    ppscope_tui::frame_text(&a, w, h).unwrap();
                }
            }
        }
    }
}
