//! The `--kv` spelling: `SchemeSpec`'s parser and printer.

use burn_kvschemes::SchemeSpec;

/// Parses `data` as a scheme spelling; one that parses must print as a spelling that parses back
/// to the same scheme and prints the same. Accepted: the spelling parsed.
pub fn scheme_spec(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(spec) = text.parse::<SchemeSpec>() else {
        return false;
    };
    let printed = spec.to_string();
    match printed.parse::<SchemeSpec>() {
        Ok(again) => {
            assert_eq!(again, spec, "`{text}` printed as `{printed}`");
            assert_eq!(again.to_string(), printed, "`{text}`");
        }
        Err(e) => panic!("`{text}` printed as `{printed}`, which does not parse: {e}"),
    }
    true
}
