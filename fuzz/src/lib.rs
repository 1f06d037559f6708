//! What each fuzz target does with one input, in one place: the libFuzzer binaries in
//! `fuzz_targets/` call these, and `tests/reliability_fuzz.rs` replays the corpus and every
//! kept crash (`fuzz/regressions/`) through the very same functions on a plain `cargo test`.
//! Each returns normally for any input; a panic, abort or hang is the bug.
use ppscope::{
    args::{parse_duration, parse_listen},
    host::{btf::KernelBtf, netlink},
    recording::Recording,
};

/// The recording reader (`diagnose --replay`, `simulate --replay`): a recording or an error
/// sentence.
pub fn record(data: &[u8]) {
    if let Ok(rec) = Recording::parse(data) {
        // What a replay does next with a recording that parsed.
        let samples = rec.samples();
        assert_eq!(samples.len(), rec.frames.len());
    }
}

/// The BTF offset resolver fed arbitrary BTF: every query the probes make at start gives an
/// offset, "unknown" or an error.
pub fn btf(data: &[u8]) {
    let Ok(btf) = KernelBtf::from_bytes(data) else {
        return;
    };
    let _ = btf.kernel_offsets();
    let _ = btf.gve_offsets();
    let _ = btf.member_offset("page_pool", &["p", "pool_size"]);
    let _ = btf.member_offset("page", &["pp"]);
    let _ = btf.func_param_count("page_pool_put_unrefed_netmem");
    let _ = btf.enum_values("skb_drop_reason");
}

/// The netlink answer parsers (netdev page-pool dumps, nlctrl family replies, errors).
pub fn netlink(data: &[u8]) {
    let _ = netlink::parse_page_pool_dump(data);
    let _ = netlink::parse_page_pool_stats_dump(data);
    let _ = netlink::parse_family_reply(data);
    // The attribute decoders alone, as the dump parsers call them after the headers.
    let _ = netlink::parse_page_pool_attrs(data);
    let _ = netlink::parse_page_pool_stats_attrs(data);
}

/// Durations (`--duration`, `--interval`, `--grace`) and the agent's `--listen`: a value that
/// holds what it promises, or a sentence.
pub fn args(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match parse_duration(s) {
        Ok(d) => assert!(!d.is_zero(), "{s:?} parsed to a zero duration"),
        Err(e) => assert!(!e.is_empty(), "{s:?}: empty error"),
    }
    match parse_listen(s) {
        // What we print must read back as the same address.
        Ok(a) => assert_eq!(parse_listen(&a.to_string()), Ok(a)),
        Err(e) => assert!(!e.is_empty(), "{s:?}: empty error"),
    }
}

/// What a target does with one input.
pub type Target = fn(&[u8]);

/// Every target by name, for the replay test.
pub const TARGETS: &[(&str, Target)] = &[
    ("record", record),
    ("btf", btf),
    ("netlink", netlink),
    ("args", args),
];
