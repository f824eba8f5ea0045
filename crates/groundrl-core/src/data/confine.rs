//! Paths read from data and model files, kept inside their folder.
//!
//! A sample file names its images, an evaluation record its screenshot, a weights index its shards.
//! Such a file may come from anywhere, so a path in it is trusted only as far as the folder it sits
//! in: an absolute path, a `..` step or a symlink that leads out of that folder is refused unless
//! the user asks for it ([`PathPolicy::AllowOutside`], `--allow-outside-paths`). Whatever the
//! policy, only regular files are read and nothing under `/dev` is: a device or a FIFO would hang
//! a reader or feed it without end.

use std::path::{Component, Path, PathBuf};

/// Whether a path in a data file may lead out of the file's folder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PathPolicy {
    /// Only files inside the folder (after following symlinks).
    #[default]
    Inside,
    /// Any regular file outside `/dev`, as the user asked.
    AllowOutside,
}

impl PathPolicy {
    /// The policy a `--allow-outside-paths` flag asks for.
    pub fn from_flag(allow_outside: bool) -> Self {
        if allow_outside {
            PathPolicy::AllowOutside
        } else {
            PathPolicy::Inside
        }
    }
}

/// Why a path from a data file is not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("{0} does not exist")]
    Missing(String),
    #[error("{path:?} {why}, outside {base}")]
    Outside { path: String, base: String, why: String },
    #[error("{path:?} is {resolved}: files under /dev are never read")]
    Device { path: String, resolved: String },
    #[error("{path:?} ({resolved}) is not a regular file")]
    NotAFile { path: String, resolved: String },
    #[error("{path}: {problem}")]
    Unreadable { path: String, problem: String },
}

/// Where `path`, as written in a file in `base`, lives on disk, following symlinks; refused as
/// the module doc says. An absolute path or a `..` step is fine as long as it ends inside `base`
/// (a record may name its image by an absolute path into the dataset's folder). A path that leads
/// out is refused whether or not its target exists, so that refusals tell nothing about files
/// outside.
pub fn resolve(base: &Path, path: &str, policy: PathPolicy) -> Result<PathBuf, PathError> {
    let joined = base.join(path);
    if policy == PathPolicy::Inside && !inside(&joined, base)? {
        let why = if Path::new(path).has_root() {
            "is absolute"
        } else {
            "steps up with `..`"
        };
        return Err(PathError::Outside {
            path: path.to_string(),
            base: base.display().to_string(),
            why: why.to_string(),
        });
    }
    let resolved = canonical(&joined)?;
    let shown = resolved.display().to_string();
    if resolved.starts_with("/dev") || joined.starts_with("/dev") {
        return Err(PathError::Device {
            path: path.to_string(),
            resolved: shown,
        });
    }
    if policy == PathPolicy::Inside && !resolved.starts_with(canonical(base)?) {
        return Err(PathError::Outside {
            path: path.to_string(),
            base: base.display().to_string(),
            why: format!("leads through a symlink to {shown}"),
        });
    }
    if !resolved.is_file() {
        return Err(PathError::NotAFile {
            path: path.to_string(),
            resolved: shown,
        });
    }
    Ok(resolved)
}

/// Whether `joined` lies in `base` as written (`.` and `..` taken lexically), or, where it exists,
/// once symlinks are followed (`base` itself may be reached through one).
fn inside(joined: &Path, base: &Path) -> Result<bool, PathError> {
    let unreadable = |e: std::io::Error| PathError::Unreadable {
        path: joined.display().to_string(),
        problem: e.to_string(),
    };
    let written = lexical_absolute(joined).map_err(unreadable)?;
    if written.starts_with(lexical_absolute(base_folder(base)).map_err(unreadable)?) {
        return Ok(true);
    }
    match (joined.canonicalize(), base_folder(base).canonicalize()) {
        (Ok(file), Ok(folder)) => Ok(file.starts_with(folder)),
        _ => Ok(false),
    }
}

/// `base`, with the empty path (a file name without folder) as the current folder.
fn base_folder(base: &Path) -> &Path {
    if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    }
}

fn canonical(path: &Path) -> Result<PathBuf, PathError> {
    base_folder(path).canonicalize().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => PathError::Missing(path.display().to_string()),
        _ => PathError::Unreadable {
            path: path.display().to_string(),
            problem: e.to_string(),
        },
    })
}

/// `path` as seen from `folder`: the relative path (with `..` steps where `path` is not inside
/// `folder`) that `folder.join(result)` turns back into `path`. Both are first made absolute against
/// the current folder, with `.` and `..` removed lexically. Writers use it so that a sample file
/// names its images relative to its own folder, as readers resolve them.
pub fn relative_to(path: &Path, folder: &Path) -> std::io::Result<PathBuf> {
    let (path, folder) = (lexical_absolute(path)?, lexical_absolute(folder)?);
    let common = path
        .components()
        .zip(folder.components())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = folder.components().skip(common).map(|_| Component::ParentDir);
    Ok(ups.chain(path.components().skip(common)).collect())
}

fn lexical_absolute(path: &Path) -> std::io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for part in std::path::absolute(path)?.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("groundrl-confine-{name}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("inner")).unwrap();
        std::fs::write(dir.join("inner/a.png"), b"x").unwrap();
        std::fs::write(dir.join("secret.txt"), b"x").unwrap();
        dir
    }

    #[test]
    fn inside_paths_resolve_and_escapes_are_named() {
        let dir = folder("escape");
        let base = dir.join("inner");
        assert_eq!(
            resolve(&base, "a.png", PathPolicy::Inside).unwrap(),
            base.join("a.png").canonicalize().unwrap()
        );
        let err = resolve(&base, "../secret.txt", PathPolicy::Inside).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("\"../secret.txt\" steps up with `..`, outside {}", base.display())
        );
        assert!(matches!(
            resolve(&base, "/etc/passwd", PathPolicy::Inside),
            Err(PathError::Outside { why, .. }) if why == "is absolute"
        ));
        // Absolute paths and `..` steps that end inside are inside.
        let absolute = base.join("a.png").canonicalize().unwrap();
        let written = absolute.display().to_string();
        assert_eq!(resolve(&base, &written, PathPolicy::Inside).unwrap(), absolute);
        assert_eq!(
            resolve(&base, "../inner/a.png", PathPolicy::Inside).unwrap(),
            absolute
        );
        // Outside is refused the same whether or not the file exists.
        assert!(matches!(
            resolve(&base, "../none.txt", PathPolicy::Inside),
            Err(PathError::Outside { why, .. }) if why == "steps up with `..`"
        ));
        std::os::unix::fs::symlink(dir.join("secret.txt"), base.join("link.png")).unwrap();
        let err = resolve(&base, "link.png", PathPolicy::Inside).unwrap_err();
        assert!(err.to_string().contains("leads through a symlink to"), "{err}");
        let allowed = resolve(&base, "../secret.txt", PathPolicy::AllowOutside).unwrap();
        assert_eq!(allowed, dir.join("secret.txt").canonicalize().unwrap());
        assert_eq!(
            resolve(&base, "b.png", PathPolicy::Inside),
            Err(PathError::Missing(base.join("b.png").display().to_string()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devices_and_folders_are_never_read() {
        let dir = folder("device");
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.png")).unwrap();
        for policy in [PathPolicy::Inside, PathPolicy::AllowOutside] {
            assert!(matches!(
                resolve(&dir, "zero.png", policy),
                Err(PathError::Device { resolved, .. }) if resolved == "/dev/zero"
            ));
            assert_eq!(
                resolve(&dir, "inner", policy),
                Err(PathError::NotAFile {
                    path: "inner".into(),
                    resolved: dir.join("inner").canonicalize().unwrap().display().to_string()
                })
            );
        }
        assert!(matches!(
            resolve(&dir, "/dev/zero", PathPolicy::AllowOutside),
            Err(PathError::Device { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relative_to_walks_up_and_down() {
        let cases = [
            ("/data/images/a.png", "/data", "images/a.png"),
            ("/data/images/a.png", "/data/out", "../images/a.png"),
            ("/data/./x/../images/a.png", "/data/out/sub", "../../images/a.png"),
            ("/data/a.png", "/data", "a.png"),
        ];
        for (path, folder, expected) in cases {
            let got = relative_to(Path::new(path), Path::new(folder)).unwrap();
            assert_eq!(got, PathBuf::from(expected), "{path} from {folder}");
        }
        let here = std::env::current_dir().unwrap();
        let got = relative_to(Path::new("images/a.png"), &here.join("out")).unwrap();
        assert_eq!(got, PathBuf::from("../images/a.png"));
    }
}
