//! Property tests of the configuration parser: whatever the file holds (random text, a valid
//! file cut anywhere, a known key given a hostile value), parsing returns `Ok` or a
//! [`ConfigError`] naming the problem; it never panics. The daemon turns such errors into
//! exit status 2 (tests/kernel.rs checks the exit status for a few of them).

use proptest::prelude::*;

use super::Config;

/// The configuration installed with the package: every key, with comments.
const PACKAGED: &str = include_str!("../../../packaging/observer.toml");

/// (section, key) of every scalar key, as written in a file.
const KEYS: [(&str, &str); 11] = [
    ("", "listen"),
    ("", "host_root"),
    ("devices", "forget_after"),
    ("devices", "include"),
    ("histogram", "buckets"),
    ("maps", "inflight_entries"),
    ("maps", "stats_memory_mib"),
    ("stalls", "episode"),
    ("stalls", "history_requests"),
    ("stalls", "history_episodes"),
    ("stalls", "slow_default"),
];

/// Values that are wrong for most keys: negative, huge, fractional, of the wrong type,
/// negative or overflowing durations, empty and malformed.
fn hostile_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-1".to_string()),
        Just("-5s".to_string()).prop_map(|s| format!("\"{s}\"")),
        Just("\"99999999999999999999999s\"".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1e308".to_string()),
        Just("nan".to_string()),
        Just("\"\"".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("true".to_string()),
        Just("\"[\"".to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        "[a-z0-9 .:-]{0,12}".prop_map(|s| format!("\"{s}\"")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_text_never_panics(text in ".{0,400}") {
        let _ = Config::from_toml(&text, "fuzz");
    }

    #[test]
    fn truncated_packaged_file_never_panics(cut in 0usize..PACKAGED.len()) {
        let mut end = cut;
        while !PACKAGED.is_char_boundary(end) {
            end -= 1;
        }
        if let Err(e) = Config::from_toml(&PACKAGED[..end], "fuzz") {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn hostile_values_are_rejected_naming_the_key(
        which in 0..KEYS.len(),
        value in hostile_value(),
    ) {
        let (section, key) = KEYS[which];
        let text = if section.is_empty() {
            format!("{key} = {value}\n")
        } else {
            format!("[{section}]\n{key} = {value}\n")
        };
        if let Err(e) = Config::from_toml(&text, "fuzz") {
            let msg = e.to_string();
            prop_assert!(msg.contains(key), "{text:?}: {msg}");
        }
    }
}
