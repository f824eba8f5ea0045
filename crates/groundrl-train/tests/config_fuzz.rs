//! Training configs, mutated from the shipped ones (see groundrl-core's `tests/common/mutate.rs`):
//! parsing and validation never panic, a refusal names what is wrong, and a config that passes
//! holds no value that is not a finite number.

#[path = "../../groundrl-core/tests/common/mutate.rs"]
mod mutate;

use std::path::Path;

use groundrl_train::config::{ConfigError, TrainConfig};
use mutate::fuzz;

fn read(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs")
            .join(name),
    )
    .unwrap()
}

/// A config as `groundrl train` accepts it: parsed, then validated, with the files the demo
/// fills in named.
fn checked(text: &str) -> Result<TrainConfig, ConfigError> {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/rewards/synthetic-click.toml");
    let files = [
        "data.train=train.jsonl".to_string(),
        "data.test=test.jsonl".to_string(),
        "sft.data=warm-up.jsonl".to_string(),
        format!("reward.spec={}", spec.display()),
    ];
    let config = TrainConfig::from_toml_str(text, &files)?;
    config.validate()?;
    Ok(config)
}

#[test]
fn train_configs() {
    let examples = [
        read("demo-cpu.toml"),
        read("3b-1gpu.toml"),
        read("demo-tools-cpu.toml"),
    ];
    for example in &examples {
        checked(std::str::from_utf8(example).unwrap()).unwrap();
    }
    fuzz("train config TOML", 9, 3000, &examples, |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Ok(());
        };
        let config = match checked(text) {
            Ok(config) => config,
            Err(e) if e.to_string().is_empty() => return Err("an empty error".into()),
            Err(_) => return Ok(()),
        };
        let written = config.to_toml().map_err(|e| e.to_string())?;
        match written.lines().find(|l| l.ends_with("nan") || l.ends_with("inf")) {
            Some(line) => Err(format!("accepted a value that is not a number: {line}")),
            None => Ok(()),
        }
    });
}
