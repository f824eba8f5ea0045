//! The generic half of the loader: dotted `key=value` overrides merged into the user's TOML, and the
//! check that every key the user wrote exists, against the TOML serialization of the defaults.
//!
//! Nothing here knows a section by name, so a new section of [`super::TrainConfig`] is checked as soon
//! as it is a field. Typos are the point: RL runs lose days to configs that accept unknown keys
//! silently, so each one is refused with the valid name nearest to it.

use super::ConfigError;

/// Sets `key=value` in `table`, creating the tables on the dotted path. The value is read as a TOML
/// value (`8`, `1e-6`, `true`, `["q_proj"]`, `"text"`); text that is not valid TOML is taken as a
/// string, so `model.dtype=bf16` and `trainer.run_dir=runs/a` need no quotes.
pub(super) fn apply_override(table: &mut toml::Table, text: &str) -> Result<(), ConfigError> {
    let refuse = |problem: String| ConfigError::Override {
        text: text.to_string(),
        problem,
    };
    let (key, raw) = text
        .split_once('=')
        .ok_or_else(|| refuse("expected KEY=VALUE, e.g. rollout.n=8".into()))?;
    let segments: Vec<&str> = key.trim().split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(refuse(format!("`{}` is not a dotted key", key.trim())));
    }
    let raw = raw.trim();
    let value = raw
        .parse::<toml::Value>()
        .unwrap_or_else(|_| toml::Value::String(raw.to_string()));
    let (last, parents) = segments.split_last().ok_or_else(|| refuse("empty key".into()))?;
    let mut here = table;
    for (depth, segment) in parents.iter().enumerate() {
        let entry = here
            .entry(segment.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = match entry {
            toml::Value::Table(inner) => inner,
            _ => {
                let path = segments[..=depth].join(".");
                return Err(refuse(format!("`{path}` is a value, not a table")));
            }
        };
    }
    here.insert(last.to_string(), value);
    Ok(())
}

/// Refuses the first key of `user` (depth first, in file order) that `known` lacks, naming its dotted
/// path and the nearest valid name at its level.
///
/// Tables are compared recursively where both sides are tables. An empty table among the defaults is
/// free-form (the inline reward spec): its contents are checked by whoever reads it. Values of the
/// wrong type are left to the deserializer, which names the key and the expected type.
pub(super) fn check_known(user: &toml::Table, known: &toml::Table, prefix: &str) -> Result<(), ConfigError> {
    for (key, value) in user {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (known.get(key), value) {
            (None, _) => {
                return Err(ConfigError::UnknownKey {
                    suggestion: join(prefix, nearest(key, known)),
                    key: path,
                });
            }
            (Some(toml::Value::Table(expected)), toml::Value::Table(given)) if !expected.is_empty() => {
                check_known(given, expected, &path)?
            }
            _ => {}
        }
    }
    Ok(())
}

/// The key of `known` closest to `key` by Jaro-Winkler similarity (kind to typos near the end and to
/// shared prefixes such as `max_` / `min_`).
fn nearest<'a>(key: &str, known: &'a toml::Table) -> &'a str {
    known
        .keys()
        .map(|candidate| (strsim::jaro_winkler(key, candidate), candidate))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map_or("", |(_, candidate)| candidate.as_str())
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn overrides_parse_toml_values_and_take_bare_words_as_strings() {
        let mut t = table("[rollout]\nn = 8\n");
        for o in [
            "rollout.n=16",
            "optim.lr=1e-6",
            "model.lora_targets=[\"q_proj\"]",
            "model.dtype=bf16",
            "trainer.run_dir = runs/a b",
            "data.val=",
            "a.b.c=true",
        ] {
            apply_override(&mut t, o).unwrap();
        }
        let expected = table(
            "a = { b = { c = true } }\n[rollout]\nn = 16\n[optim]\nlr = 1e-6\n\
             [model]\nlora_targets = [\"q_proj\"]\ndtype = \"bf16\"\n\
             [trainer]\nrun_dir = \"runs/a b\"\n[data]\nval = \"\"\n",
        );
        assert_eq!(t, expected);
    }

    #[test]
    fn malformed_overrides_are_refused_with_the_text() {
        let mut t = table("[rollout]\nn = 8\n");
        let e = apply_override(&mut t, "rollout.n").unwrap_err().to_string();
        assert_eq!(e, "override `rollout.n`: expected KEY=VALUE, e.g. rollout.n=8");
        let e = apply_override(&mut t, "rollout..n=1").unwrap_err().to_string();
        assert_eq!(e, "override `rollout..n=1`: `rollout..n` is not a dotted key");
        let e = apply_override(&mut t, "rollout.n.x=1").unwrap_err().to_string();
        assert_eq!(e, "override `rollout.n.x=1`: `rollout.n` is a value, not a table");
    }

    #[test]
    fn unknown_keys_name_the_path_and_the_nearest_name_at_their_level() {
        let known = table("[rollout]\nn = 8\ntemperature = 1.0\ntop_p = 1.0\n[reward]\ninline = {}\n");
        let e = check_known(&table("[rollout]\ntemprature = 0.5\n"), &known, "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown key `rollout.temprature`; did you mean `rollout.temperature`?"
        );
        let e = check_known(&table("[rolout]\nn = 8\n"), &known, "").unwrap_err();
        assert_eq!(e.to_string(), "unknown key `rolout`; did you mean `rollout`?");
        // The inline reward spec is free-form; a scalar where a table is expected is the
        // deserializer's business.
        check_known(
            &table("[reward.inline.components.a]\nkind = \"iou\"\n"),
            &known,
            "",
        )
        .unwrap();
        check_known(&table("rollout = 3\n"), &known, "").unwrap();
    }
}
