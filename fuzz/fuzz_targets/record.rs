//! libFuzzer entry for `ppscope_fuzz::record` (see fuzz/src/lib.rs for what it checks).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ppscope_fuzz::record(data));
