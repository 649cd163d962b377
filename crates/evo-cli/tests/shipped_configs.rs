//! Every shipped config (configs/*.toml) loads, its shapes specialize its family for sm_90a,
//! and every `[search]` seed is a valid genome of that family: a stale seed (a knob renamed or
//! added, a constraint tightened) would otherwise stop a user's search at its start.

use std::path::PathBuf;

use evo_core::config::SearchConfig;
use evo_core::{Genome, Target};
use evo_kernels::{Family, Specializations};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_shipped_config_loads_and_its_seeds_are_valid_genomes() {
    let mut configs = 0;
    let mut seeds = 0;
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join("configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    for path in paths {
        let config =
            SearchConfig::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let templates = config
            .templates
            .clone()
            .unwrap_or_else(|| root().join("templates"));
        // Every family a config names runs its shapes (the first is the one on sm_90a).
        let mut spaces = Vec::new();
        for name in &config.families {
            let family = Family::load(&templates, &config.problem, name)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let target = Target::from_arch("sm_90a").unwrap();
            let specs = Specializations::new(family.problem, target, &config.shapes)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            specs
                .check_family(&family)
                .unwrap_or_else(|e| panic!("{}: {name}: {e}", path.display()));
            spaces.push(family.space(specs.contexts()).unwrap());
        }
        let space = &spaces[0];
        for s in &config.search.seeds {
            let g =
                Genome::parse(s).unwrap_or_else(|e| panic!("{}: seed {s}: {e}", path.display()));
            space
                .complete(&g)
                .unwrap_or_else(|e| panic!("{}: seed {s}: {e}", path.display()));
            seeds += 1;
        }
        configs += 1;
    }
    assert!(configs >= 15, "{configs} configs");
    assert!(seeds >= 10, "{seeds} seeds");
}
