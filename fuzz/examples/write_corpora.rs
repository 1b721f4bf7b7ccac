//! Writes each fuzz target's seed corpus to `libfuzzer/corpus/<target>/seed-NN`, replacing the
//! seeds written before (other files there, such as inputs a fuzzing run kept, are left).
//!
//! `cargo run --release -p kvcompress-fuzz --example write_corpora`

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("libfuzzer/corpus");
    for target in kvcompress_fuzz::TARGETS {
        let dir = root.join(target.name);
        std::fs::create_dir_all(&dir)?;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("seed-")) {
                std::fs::remove_file(path)?;
            }
        }
        let seeds = (target.seeds)();
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), seed)?;
        }
        let bytes: usize = seeds.iter().map(Vec::len).sum();
        println!("{}: {} seeds, {bytes} bytes", target.name, seeds.len());
    }
    Ok(())
}
