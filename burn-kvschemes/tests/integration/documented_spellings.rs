//! Every `--kv` spelling the README and `docs/` show parses through the library, as a user's
//! program would parse it, and prints back to a spelling that reads to the same scheme.

use std::path::Path;

use burn_kvschemes::SchemeSpec;

/// The spellings after `--kv ` in `text` (quotes stripped), without the placeholders that stand
/// for one (`SCHEME`, elided parameters `…`, upper-case names such as `OUT`).
fn spellings(text: &str) -> Vec<String> {
    text.split("--kv ")
        .skip(1)
        .map(|rest| rest.trim_start_matches('\'').split([' ', '`', '\'', ')', '|', '\n']).next().unwrap_or(""))
        .filter(|s| !s.is_empty() && !s.contains('…') && !s.chars().any(|c| c.is_ascii_uppercase()))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_documented_spellings_parse_and_print_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/");
    files
        .extend(docs.map(|entry| entry.expect("a docs entry").path()).filter(|p| p.extension() == Some("md".as_ref())));
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable markdown file");
        for spelling in spellings(&text) {
            let spec: SchemeSpec =
                spelling.parse().unwrap_or_else(|e| panic!("{}: `--kv {spelling}`: {e}", file.display()));
            let printed = spec.to_string();
            assert_eq!(
                printed.parse::<SchemeSpec>(),
                Ok(spec),
                "{}: `{spelling}` printed as `{printed}`",
                file.display()
            );
            checked += 1;
        }
    }
    // The docs show at least the dense baseline's, HACK's presets and spellings, PQ's and ZACK's.
    assert!(checked >= 10, "only {checked} spellings found in the docs");
}

#[test]
fn placeholders_are_not_taken_for_spellings() {
    let text = "run `generate --kv SCHEME`, `--kv hack:…,rotations=OUT` or `--kv 'zack:rotations=r+pq:codebooks=b'`";
    assert_eq!(spellings(text), ["zack:rotations=r+pq:codebooks=b"]);
}
