//! The fair floor: the stand-alone `spoolite-perf-limit` program of
//! `shared/perf-floor` (the least work spoolite's ingest can do with spoolite's own
//! storage layout), copied under the build's `target/perf-floor`, built there with
//! `cargo build --release` (cached: a copy whose files have not changed is not
//! rebuilt) and run on NDJSON files: a fresh database each time for the first
//! ingest, and a large database it grows in section 5.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::BenchResult;
use crate::child::{self, Measured};

/// The floor's flags of the variant "c21": upsert, the key as a BLOB, a 32 MiB page
/// cache, rows sorted by key through an external merge sort, 16 KiB pages.
const C21: &[&str] = &[
    "--upsert",
    "--blob-key",
    "--cache-mib",
    "32",
    "--sort-merge",
    "--sort-mib",
    "32",
    "--page-size",
    "16384",
];

/// One way of running the floor.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    /// As the floor's README names it.
    pub name: &'static str,
    /// Flags after C21's.
    pub extra: &'static [&'static str],
    /// The largest ratio of spoolite's first ingest to this floor that passes.
    pub limit: f64,
    /// That target, as the results show it.
    pub target: &'static str,
}

/// The fair floor: c21 with spoolite's analyst indexes and flights numbered.
pub const C21IXFR: Variant = Variant {
    name: "c21ixfr",
    extra: &["--analyst-indexes", "--flight-ref"],
    limit: 1.1,
    target: "≤ 1.1× the fair floor",
};

/// The fair floor with the batch numbered too (spoolite's schema 5 layout).
pub const C21IXFR_BATCH_REF: Variant = Variant {
    name: "c21ixfr --batch-ref",
    extra: &["--analyst-indexes", "--flight-ref", "--batch-ref"],
    limit: 1.0,
    target: "≤ 1.0× (moonshot)",
};

/// The bulk floor: the fair floor's indexes built once its rows are in, as
/// spoolite loads an empty table (issue 20's ≤ 1.0×).
pub const BULK: Variant = Variant {
    name: "bulk",
    extra: &["--analyst-indexes", "--indexes-after", "--flight-ref"],
    limit: 1.0,
    target: "≤ 1.0× the bulk floor",
};

/// The bulk floor that also writes the flight table and one crew row per crew
/// member (`--crew-rows`): the same rows spoolite's first ingest writes, the floor
/// issue 36 judges it against.
pub const BULK_CREW: Variant = Variant {
    name: "bulk+crew",
    extra: &[
        "--analyst-indexes",
        "--indexes-after",
        "--flight-ref",
        "--crew-rows",
    ],
    limit: 1.1,
    target: "≤ 1.1× the bulk+crew floor (issue 36)",
};

/// The fair floor with the crew rows and its indexes kept: how the floor grows a
/// large database (section 5), where building the indexes after the rows is no
/// option. Held to no first-ingest target.
pub const C21IXFR_CREW: Variant = Variant {
    name: "c21ixfr+crew",
    extra: &["--analyst-indexes", "--flight-ref", "--crew-rows"],
    limit: f64::INFINITY,
    target: "",
};

/// The floors every full run times beside spoolite's first ingest, interleaved.
pub const VARIANTS: [Variant; 4] = [C21IXFR, C21IXFR_BATCH_REF, BULK, BULK_CREW];

impl Variant {
    /// The command line as the results show it.
    pub fn command_line(&self) -> String {
        let mut words: Vec<&str> = C21.to_vec();
        words.extend_from_slice(self.extra);
        words.join(" ")
    }
}

/// The source folder: `given` (relative to the current folder), or by default
/// `../shared/perf-floor` from the workspace root, looked for beside that root and
/// each folder above it (a git worktree sits deeper than the main checkout), then
/// the same from the current folder.
pub fn resolve(given: Option<&Path>) -> Result<PathBuf, String> {
    let is_floor = |dir: &Path| dir.join("Cargo.toml").is_file() && dir.join("src").is_dir();
    if let Some(given) = given {
        let dir = std::env::current_dir()
            .map(|cwd| cwd.join(given))
            .unwrap_or_else(|_| given.to_owned());
        return if is_floor(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "--perf-floor {}: no Cargo.toml and src/ there",
                dir.display()
            ))
        };
    }
    // The workspace's root: the bench crate is its folder `bench/`.
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().unwrap_or(manifest_dir).to_owned();
    let mut starts = vec![root];
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    for start in &starts {
        for above in start.ancestors().skip(1) {
            let dir = above.join("shared").join("perf-floor");
            if is_floor(&dir) {
                return Ok(dir);
            }
        }
    }
    Err(format!(
        "no shared/perf-floor beside {} or a folder above it; pass --perf-floor DIR, \
         a copy of the floor's source (the `perf-floor` folder of the project's shared \
         folder, laid beside the repository as `../shared/perf-floor`)",
        starts[0].display()
    ))
}

/// Where the copy is built: `perf-floor` in the folder above this binary's (the
/// `target/` of the build that made the bench), so that every run of this build
/// reuses it.
pub fn build_dir() -> BenchResult<PathBuf> {
    let exe = std::env::current_exe()?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the bench binary has no folder above its own")?;
    Ok(target.join("perf-floor"))
}

/// A built floor.
#[derive(Debug, Clone)]
pub struct Built {
    pub exe: PathBuf,
    pub source: PathBuf,
    /// Seconds `cargo build --release` took (nearly 0 when nothing changed).
    pub build_seconds: f64,
    /// Files of the source that differed from the copy (0: the cached build stood).
    pub files_copied: usize,
}

/// Copies `source` into `copy` (only files whose bytes differ, so that cargo sees
/// an unchanged copy as unchanged) and builds it with `cargo build --release`,
/// cargo's progress going to stderr.
pub fn build(source: &Path, copy: &Path) -> BenchResult<Built> {
    let files_copied = sync_tree(source, copy)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let status = Command::new(&cargo)
        .arg("build")
        .arg("--release")
        .arg("--manifest-path")
        .arg(copy.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(copy.join("target"))
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("start {}: {e}", PathBuf::from(&cargo).display()))?;
    let build_seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!(
            "`cargo build --release` in {} failed ({status}); its output is above on stderr",
            copy.display()
        )
        .into());
    }
    let exe = exe_in(copy)?;
    if !exe.is_file() {
        return Err(format!("the build made no {}", exe.display()).into());
    }
    Ok(Built {
        exe,
        source: source.to_owned(),
        build_seconds,
        files_copied,
    })
}

/// Where the build of the copy `copy` puts the floor.
fn exe_in(copy: &Path) -> BenchResult<PathBuf> {
    Ok(copy
        .join("target")
        .join("release")
        .join(package_name(&copy.join("Cargo.toml"))?))
}

/// Whether `copy` holds a build of the floor already (the smoke run builds only
/// then: a first build takes minutes).
pub fn is_built(copy: &Path) -> bool {
    exe_in(copy).is_ok_and(|exe| exe.is_file())
}

/// The `name = "…"` of the manifest's `[package]`: the binary's name.
fn package_name(manifest: &Path) -> BenchResult<String> {
    let text = std::fs::read_to_string(manifest)?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name") {
            let value = value.trim_start().trim_start_matches('=').trim();
            return Ok(value.trim_matches('"').to_owned());
        }
    }
    Err(format!("{}: no [package] name", manifest.display()).into())
}

/// Makes `copy` hold `source`'s files (its `target/` left out); returns how many
/// were written. The source may be read-only, and so may an earlier copy.
fn sync_tree(source: &Path, copy: &Path) -> BenchResult<usize> {
    use std::os::unix::fs::PermissionsExt;
    let writable = |dir: &Path| -> BenchResult<()> {
        let mode = std::fs::metadata(dir)?.permissions().mode();
        if mode & 0o200 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o700))?;
        }
        Ok(())
    };
    if !copy.exists() {
        std::fs::create_dir_all(copy)?;
    }
    let mut written = 0;
    for entry in std::fs::read_dir(source)? {
        let entry = entry?;
        let name = entry.file_name();
        let (from, to) = (entry.path(), copy.join(&name));
        if entry.file_type()?.is_dir() {
            if name == "target" {
                continue;
            }
            if !to.exists() {
                writable(copy)?;
            }
            written += sync_tree(&from, &to)?;
        } else if std::fs::read(&to).ok() != Some(std::fs::read(&from)?) {
            writable(copy)?;
            if to.exists() {
                std::fs::remove_file(&to)?;
            }
            std::fs::write(&to, std::fs::read(&from)?)?;
            written += 1;
        }
    }
    Ok(written)
}

/// One run of the floor.
#[derive(Debug, Clone, Copy)]
pub struct FloorRun {
    /// The floor's own `elapsed_s`: opening the file to closing the database.
    pub elapsed_s: f64,
    /// Spawn to exit of its process.
    pub wall_s: f64,
    pub peak_rss_bytes: u64,
}

/// Runs `variant` of the floor on `file` into `db` (new, or one the floor wrote
/// before); it must report `rows` rows.
pub fn run(
    exe: &Path,
    variant: Variant,
    db: &Path,
    file: &Path,
    rows: u64,
) -> BenchResult<FloorRun> {
    let mut command = Command::new(exe);
    command
        .args(C21)
        .args(variant.extra)
        .arg(db)
        .arg(file)
        .stderr(Stdio::null());
    let measured: Measured = child::measure(command)?;
    let line = measured.stdout.trim();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
            .ok_or_else(|| format!("the floor printed no {name}=: {line:?}"))
    };
    let reported: u64 = field("rows")?.parse()?;
    if reported != rows {
        return Err(format!(
            "the floor {} wrote {reported} rows, expected {rows}",
            variant.name
        )
        .into());
    }
    Ok(FloorRun {
        elapsed_s: field("elapsed_s")?.parse()?,
        wall_s: measured.wall.as_secs_f64(),
        peak_rss_bytes: measured.peak_rss_bytes,
    })
}
