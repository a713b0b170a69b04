#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| meshwork::fuzzing::rpc_envelope(data));
