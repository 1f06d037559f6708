//! Whole frames rendered with ratatui's TestBackend and compared with the committed snapshots
//! in `tests/snapshots/` (insta; with CI=true a mismatch or a missing snapshot fails instead of
//! writing a new one). Review a change with `cargo insta review`.
use std::time::Duration;

use ppscope::{
    advice::{self, scenario},
    snapshot::{
        Advice, DevmemView, GveQueueView, GveView, Latency, PoolView, SiteView, Snapshot,
        TeardownView,
    },
    source::{SimSource, Source},
};
use ppscope_tui::{frame_text, App};

fn latency(buckets: &[(usize, u64)]) -> Latency {
    let mut b = [0u64; 32];
    for &(i, n) in buckets {
        b[i] = n;
    }
    Latency::from_log2(&b, 0).expect("non-empty")
}

/// A pool with every figure known; `slow` and `ring_full` per second over a 1 s interval.
fn pool(addr: u64, ifname: &str, queue: u32, allocs: u64, slow: u64, ring_full: u64) -> PoolView {
    let mut p = PoolView::unprobed(0, None, None);
    // Named as the model names a pool without a netlink id (never by its address).
    p.pool = format!("ppscope:{}", (addr >> 12) & 0xfff);
    p.addr = addr;
    p.netlink_id = None;
    p.ifname = Some(ifname.into());
    p.driver = Some("gve".into());
    p.queue = Some(queue);
    p.pool_size = Some(4096);
    p.ring_size = Some(4096);
    p.ring_fill = Some(1024);
    p.inflight_pages = Some(2048);
    p.inflight_bytes = Some(2048 * 4096);
    let ring = allocs / 16;
    p.alloc.total = Some(allocs);
    p.alloc.slow = Some(slow);
    p.alloc.ring = Some(ring);
    p.alloc.cache = Some(allocs - ring - slow);
    p.alloc.ring_empty = Some(slow);
    let recycle_ring = (allocs - allocs / 2).saturating_sub(ring_full);
    p.recycle.total = Some(allocs / 2 + recycle_ring + ring_full);
    p.recycle.ring_full = Some(ring_full);
    p.recycle.cached = Some(allocs / 2);
    p.recycle.ring = Some(recycle_ring);
    p.ring_hit_rate = Some(ring as f64 / (ring + slow).max(1) as f64);
    p.fast_path_rate = Some((allocs - slow) as f64 / allocs.max(1) as f64);
    if slow > 0 {
        p.slow_path_latency = Some(latency(&[(10, slow / 2 + 1), (12, slow / 2), (15, 1)]));
    }
    p
}

fn grow_advice() -> Advice {
    let sc = scenario::gve_devmem_alltoall();
    let mut ctx = sc.context.clone();
    ctx.ifname = Some("eth1".into());
    advice::advise(&sc.profile, &ctx, 0.99)
}

fn fleet() -> Snapshot {
    let mut starving = pool(0xffff_8880_0000_2000, "eth1", 3, 400_000, 250_000, 250_000);
    starving.memory_provider = Some(true);
    starving.advice = Some(grow_advice());
    Snapshot::with_pools(
        "6.12.0-test",
        1.0,
        vec![
            pool(0xffff_8880_0000_1000, "eth0", 0, 900_000, 40, 0),
            starving,
            pool(0xffff_8880_0000_3000, "eth0", 1, 500_000, 3_000, 9_000),
            {
                let mut idle = PoolView::unprobed(7, None, None);
                idle.pool = "ppscope:4".into();
                idle
            },
        ],
    )
}

fn with_system(mut s: Snapshot) -> Snapshot {
    let site = |calls: u64, value: Option<u64>| {
        let mut v = SiteView {
            calls,
            latency: Some(latency(&[(11, calls / 2), (13, calls / 2), (17, 3)])),
            ..Default::default()
        };
        if let Some(sum) = value {
            v.value_sum = Some(sum);
            v.value_per_call = Some(sum as f64 / calls as f64);
            v.ns_per_value = Some(45.0);
        }
        v
    };
    s.devmem = Some(DevmemView {
        dontneed: Some(site(120, Some(120 * 128))),
        free: Some(site(7_500, None)),
        provider_alloc: None,
    });
    s.gve = Some(GveView {
        alloc: Some(site(250_000, None)),
        queues: (0..4)
            .map(|q| GveQueueView {
                queue: q,
                poll: site(1_000 + q as u64, Some(64_000)),
            })
            .collect(),
    });
    s
}

fn app_with(snaps: impl IntoIterator<Item = Snapshot>) -> App {
    let mut app = App::new("test source", Duration::from_secs(1));
    for s in snaps {
        app.on_snapshot(s);
    }
    app
}

fn frame(app: &App, w: u16, h: u16) -> String {
    frame_text(app, w, h).expect("renders")
}

#[test]
fn a_destroyed_pool_says_so_in_its_detail() {
    let mut p = pool(0xffff_8880_0000_1000, "eth0", 0, 900_000, 40, 0);
    p.teardown = Some(TeardownView {
        attempts: 2,
        inflight_pages: 12,
    });
    let app = app_with([Snapshot::with_pools("6.12.0-test", 1.0, vec![p])]);
    let text = frame(&app, 120, 40);
    assert!(
        text.contains("destroyed: 2 release attempt(s), 12 pages still out"),
        "{text}"
    );
}

/// A light source: the footer names the level and counts the hooks it left off apart
/// from missing ones.
#[test]
fn a_light_source_says_its_detail_and_what_it_left_off() {
    use ppscope::snapshot::{Backend, Detail, HookStatus, LEFT_OFF_LIGHT};
    let mut p = pool(0xffff_8880_0000_1000, "eth0", 0, 900_000, 40, 0);
    p.alloc.cache = None;
    p.alloc.total = None;
    p.fast_path_rate = None;
    let mut s = Snapshot::with_pools("6.12.0-test", 1.0, vec![p]);
    s.detail = Some(Detail::Light);
    for (name, backend, reason) in [
        ("alloc", None, LEFT_OFF_LIGHT),
        ("recycle", None, LEFT_OFF_LIGHT),
        ("refill", Some(Backend::Fentry), ""),
        ("devmem_dontneed", None, "kprobe: no kprobes"),
    ] {
        s.backends.insert(
            name.into(),
            HookStatus {
                reasons: vec![reason.into()],
                ..ppscope::testing::hook_status(name, backend, None)
            },
        );
    }
    let text = frame(&app_with([s]), 160, 30);
    assert!(
        text.contains("detail light · hooks: fentry 1 missing 1 left off 2"),
        "{text}"
    );
}

/// A tracepoint-only kernel: nothing splits allocations, yet a veth pool cycling 25,500
/// pages a second through the allocator on a 256-entry ring has a verdict, which the row
/// shows and the detail pane explains; a pool with too little to judge stays `?`.
#[test]
fn a_tracepoint_only_pool_has_a_verdict_from_its_pages() {
    let traced = |addr: u64, name: &str, fresh: u64, returned: u64| {
        let mut p = PoolView::unprobed(0, None, Some(name.into()));
        p.netlink_id = None;
        p.addr = addr;
        p.pool = format!("ppscope:{addr}");
        p.driver = Some("veth".into());
        p.queue = Some(0);
        p.ring_size = Some(256);
        p.pool_size = Some(256);
        p.pages.allocated = Some(fresh);
        p.pages.released = Some(returned);
        p.recycle.ring_full = Some(returned);
        p
    };
    let s = Snapshot::with_pools(
        "6.18.0-test",
        2.0,
        vec![
            traced(1, "veth1", 52_000, 51_000),
            traced(2, "veth3", 100, 100),
        ],
    );
    let text = frame(&app_with([s]), 120, 30);
    let row = |dev: &str| {
        text.lines()
            .find(|l| l.contains(dev) && l.contains("256/256"))
            .unwrap_or_else(|| panic!("no row for {dev}:\n{text}"))
            .to_string()
    };
    // The HEALTH column is the first.
    let health = |dev: &str| {
        row(dev)
            .trim_start_matches('│')
            .split_whitespace()
            .next()
            .map(str::to_string)
    };
    assert_eq!(health("veth1").as_deref(), Some("warn"), "{text}");
    assert_eq!(health("veth3").as_deref(), Some("?"), "{text}");
    assert!(
        text.contains("health warn (churn): 25500 pages/s cycled through the allocator,"),
        "{text}"
    );
}

#[test]
fn waiting_for_data() {
    insta::assert_snapshot!(frame(&app_with([]), 80, 24));
}

#[test]
fn no_pools() {
    let app = app_with([Snapshot::with_pools("6.12.0-test", 1.0, vec![])]);
    insta::assert_snapshot!(frame(&app, 80, 24));
}

/// No pool at --detail light: the headline says what could hide one, whole, in its two lines
/// at 80 columns, for every hint (a refill hook or not, the kernel's stats read or not).
#[test]
fn no_pools_where_light_traffic_is_unseen_says_so_in_the_headline() {
    use ppscope::snapshot::{Backend, Detail, NetlinkSourceView};
    for (refill, stats) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut s = Snapshot::with_pools("6.18.0-test", 1.0, vec![]);
        s.detail = Some(Detail::Light);
        s.netlink = Some(NetlinkSourceView {
            stats_available: stats,
            stats_missing: None,
            error: None,
        });
        for (name, backend) in [
            ("alloc", None),
            ("page_hold", Some(Backend::Tracepoint)),
            ("refill", refill.then_some(Backend::Fentry)),
        ] {
            s.backends.insert(
                name.into(),
                ppscope::testing::hook_status(name, backend, None),
            );
        }
        let hint = s.quiet_hint().text();
        let text = frame(&app_with([s]), 80, 24);
        let headline: String = text
            .lines()
            .skip(1)
            .take(2)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            headline,
            format!("No page_pool activity in this interval ({hint})."),
            "{text}"
        );
        if !refill && !stats {
            assert_eq!(
                hint,
                "light traffic is unseen here: a pool shows only at the page allocator"
            );
        }
    }
}

#[test]
fn one_pool() {
    let s = Snapshot::with_pools(
        "6.12.0-test",
        1.0,
        vec![pool(0xffff_8880_0000_1000, "eth0", 0, 900_000, 40, 0)],
    );
    insta::assert_snapshot!(frame(&app_with([s]), 80, 24));
}

#[test]
fn five_hundred_pools() {
    let pools = (0..500u64)
        .map(|i| {
            pool(
                0xffff_8880_1000_0000 + i * 0x1000,
                &format!("eth{}", i / 64),
                (i % 64) as u32,
                100_000 + i * 37,
                (i * 7919) % 5_000,
                (i * 104_729) % 7_000,
            )
        })
        .collect();
    let app = app_with([Snapshot::with_pools("6.12.0-test", 1.0, pools)]);
    let text = frame(&app, 120, 40);
    insta::assert_snapshot!(text);
}

#[test]
fn starving_pool_with_grow_advice_80x24() {
    insta::assert_snapshot!(frame(&app_with([fleet()]), 80, 24));
}

#[test]
fn starving_pool_with_grow_advice_120x40() {
    let text = frame(&app_with([fleet()]), 120, 40);
    // The detail pane draws the advice curve with the current and recommended sizes on it,
    // the sizes it spans on its axis.
    for label in [
        "advice curve: recycled % by ring size",
        "now 4096",
        "advised 16384",
        "target 99%",
    ] {
        assert!(text.contains(label), "no {label:?} in:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.contains(" 64 ") && l.trim_end().ends_with("16384│")),
        "no size axis from 64 to 16384:\n{text}"
    );
    insta::assert_snapshot!(text);
}

#[test]
fn small_terminal_40x10() {
    insta::assert_snapshot!(frame(&app_with([fleet()]), 40, 10));
}

#[test]
fn tiny_terminals_never_panic() {
    let app = app_with([with_system(fleet())]);
    for (w, h) in [
        (1, 1),
        (2, 1),
        (1, 30),
        (29, 7),
        (30, 8),
        (10, 3),
        (200, 2),
        (31, 12),
    ] {
        frame(&app, w, h);
    }
    insta::assert_snapshot!(frame(&app, 24, 6));
}

#[test]
fn devmem_and_gve_panels() {
    insta::assert_snapshot!(frame(&app_with([with_system(fleet())]), 120, 40));
}

#[test]
fn help_overlay() {
    let mut app = app_with([fleet()]);
    app.on_key(ppscope_tui::keys::Key::Char('?').to_event());
    insta::assert_snapshot!(frame(&app, 80, 24));
}

#[test]
fn the_starving_row_is_red() {
    use ratatui::{backend::TestBackend, style::Color, Terminal};
    let app = app_with([fleet()]);
    let mut t = Terminal::new(TestBackend::new(120, 40)).unwrap();
    t.draw(|f| ppscope_tui::render(f, &app)).unwrap();
    let buf = t.backend().buffer();
    // The table's first body row (row 5: title, 2 headline lines, border, header) is the
    // starving pool, first in the default order.
    let row: String = (0..120).map(|x| buf[(x, 5)].symbol()).collect();
    assert!(row.contains("STARV") && row.contains("eth1 q3"), "{row}");
    let x = row.find("STARV").unwrap() as u16;
    assert_eq!(buf[(x, 5)].fg, Color::Red);
}

fn sim_app(name: &str, steps: usize) -> App {
    let mut src = SimSource::new(name).expect("scenario");
    let mut app = App::new(src.describe(), Duration::from_secs(1));
    for _ in 0..steps {
        let s = src
            .next(Duration::from_secs(1))
            .unwrap()
            .expect("sim never ends");
        app.on_snapshot(s);
    }
    app
}

#[test]
fn simulated_gve_devmem_alltoall() {
    let app = sim_app("gve-devmem-alltoall", 5);
    let text = frame(&app, 120, 40);
    assert!(text.contains("grow"), "{text}");
    insta::assert_snapshot!(text);
    insta::assert_snapshot!("simulated_gve_devmem_alltoall_80x24", frame(&app, 80, 24));
}

#[test]
fn simulated_all_scenarios() {
    insta::assert_snapshot!(frame(&sim_app("all", 3), 120, 40));
}

/// A recording as `ppscope record` writes it: a veth pool sampled every 10 ms for 3 s whose
/// ring overflows in bursts every 100 ms; replayed through the same source `top --replay`
/// uses.
fn replayed_app() -> App {
    use ppscope::{source::ReplaySource, testing};

    // A fixed path: the footer names the file and the frame is compared as a snapshot.
    let dir = std::path::PathBuf::from("/tmp/ppscope-tui-replay");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("veth.ppr");
    // 1,000 allocations per 10 ms; every 10th step a burst of 600 frees overruns the
    // 256-entry ring and the next refills find it empty.
    let overrun = testing::Overrun {
        slow_calls: 4,
        slow_8us: 3,
        slow_65us: 1,
        released: 344,
        pages_in: 256,
    };
    testing::write_overrun_recording(&path, 0xffff_8880_1234_0000, 0, &overrun);
    let mut src = ReplaySource::open(&path).unwrap();
    let mut app = App::new(src.describe(), Duration::from_secs(1));
    for _ in 0..2 {
        app.on_snapshot(
            src.next(Duration::from_secs(1))
                .unwrap()
                .expect("3 s recorded"),
        );
        app.set_source(src.describe());
    }
    std::fs::remove_dir_all(&dir).unwrap();
    app
}

#[test]
fn replayed_recording() {
    let app = replayed_app();
    let text = frame(&app, 120, 40);
    // 1,000 allocations per 10 ms: 100k/s, the pool named by its device.
    let row = text
        .lines()
        .find(|l| l.starts_with('│') && l.contains("veth1 "))
        .unwrap_or_else(|| panic!("no veth1 row:\n{text}"));
    assert!(row.contains("100k"), "{row}");
    insta::assert_snapshot!(text);
}
