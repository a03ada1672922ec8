//! The documentation's examples, run: README.md and every page of docs/.
//!
//! - **SQL.** Every statement of every ```sql block runs on the docs site's database
//!   (below), and none reads the event table or a crew table row by row.
//! - **Commands.** Every `spoolite …`, `sqlite3 …` and `gzip …` command in a ```console block
//!   (a line starting with `$ `) or a ```sh block (every line that is not a comment)
//!   runs, through `sh`, in the docs site's folder, with the binary under test first
//!   on `PATH`, and must exit 0, or N where the line ends with a comment saying
//!   `exit N` or `exits N`. A line ending in `\` continues on the next.
//! - **Output.** In a ```console block, the lines after a command, up to the next
//!   `$ ` line, are its stdout, compared exactly; a last line `…` compares only the
//!   lines above it (the start of the output). A block whose info string says
//!   `varies` (```` ```console varies ````: a pid, a time, a duration, a size) has its
//!   commands run and their exit codes checked, not their output.
//! - **Files.** A block whose info string holds `file=NAME` shows a file of
//!   `docs/examples/` and must equal it byte for byte.
//!
//! The docs site is a folder laid out as the repository's folder is after the
//! README's tour: `spool/`, `spoolite.db` and a copy of `docs/examples/`, every batch
//! of `docs/examples/` ingested (in the order of `EXAMPLE_BATCHES`) and a daemon
//! serving the spool, so that `spoolite status` with no flags finds it, as an
//! operator's does on a packaged host. The packaged paths stand for the site's:
//! `/var/lib/spoolite/` is the site's folder, `/var/spool/spoolite` its spool and
//! `/var/backups/spoolite/` its `backups/`; a leading `sudo -u spoolite ` is dropped.
//! The site defaults file is an empty one, whatever the machine has.
//!
//! Not run, by rule: `spoolite run` (the site's own daemon serves the spool) and
//! `--follow` (neither ends by itself), and a command holding a PostgreSQL URI
//! (`postgres://`, `postgresql://`: the PostgreSQL tests cover those).
//!
//! `docs/reference.md` is generated from the binary's `--help` pages: when it
//! differs, `SPOOLITE_BLESS=1 cargo test --test it docs::` writes it again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{Daemon, Site, ingest_json, query, spoolite};

/// The repository root.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The batches of `docs/examples/`, in the order the docs site takes them.
const EXAMPLE_BATCHES: [&str; 3] = [
    "ba0117-20261129.json",
    "ops-2026-11-30.ndjson",
    "ba0117-correction.json",
];

/// README.md and docs/*.md, README first, then the guides by name: (path relative
/// to the repository, text).
fn pages() -> Vec<(String, String)> {
    let mut names: Vec<String> = fs::read_dir(repo().join("docs"))
        .expect("list docs/")
        .map(|entry| entry.expect("docs/ entry").file_name())
        .filter_map(|name| name.to_str().map(str::to_owned))
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    names.sort();
    names.insert(0, "README.md".to_owned());
    names
        .into_iter()
        .map(|name| {
            let text = fs::read_to_string(repo().join(&name))
                .unwrap_or_else(|e| panic!("read {name}: {e}"));
            (name, text)
        })
        .collect()
}

/// One fenced block: its info string (`sql`, `console varies`), its text and the
/// line of the page it starts on.
struct Block {
    info: String,
    text: String,
    line: usize,
}

impl Block {
    fn language(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    fn says(&self, word: &str) -> bool {
        self.info.split_whitespace().skip(1).any(|w| w == word)
    }
}

/// The ``` blocks of `text`, in order.
fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_owned(),
                    text: String::new(),
                    line: n + 1,
                });
            }
            (Some(_), Some(_)) => found.push(open.take().expect("open block")),
            (Some(block), None) => {
                // Indented blocks (in a list) lose the indentation of their fence.
                let indent = line.len() - trimmed.len();
                let fence_indent = text
                    .lines()
                    .nth(block.line - 1)
                    .map_or(0, |f| f.len() - f.trim_start().len());
                let cut = indent.min(fence_indent);
                block.text.push_str(&line[cut..]);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a ``` block is not closed");
    found
}

// ---------------------------------------------------------------------------------
// The docs site

/// The docs site: the folder, its daemon and its empty defaults file.
struct DocsSite {
    site: Site,
    /// Serves the spool while the site lives; dropping it stops it.
    _daemon: Daemon,
    defaults: PathBuf,
}

impl DocsSite {
    fn new() -> DocsSite {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().to_owned();
        let site = Site {
            spool: root.join("spool"),
            db: root.join("spoolite.db"),
            log: root.join("daemon.log"),
            dir,
        };
        let examples = root.join("docs").join("examples");
        fs::create_dir_all(&examples).expect("mkdir docs/examples");
        for entry in fs::read_dir(repo().join("docs/examples")).expect("list docs/examples") {
            let entry = entry.expect("docs/examples entry");
            fs::copy(entry.path(), examples.join(entry.file_name())).expect("copy example");
        }
        fs::create_dir(root.join("backups")).expect("mkdir backups");
        let defaults = root.join("defaults.env");
        fs::write(&defaults, "").expect("write defaults file");
        let batches: Vec<PathBuf> = EXAMPLE_BATCHES.iter().map(|b| examples.join(b)).collect();
        let batches: Vec<&Path> = batches.iter().map(PathBuf::as_path).collect();
        let (code, lines) = ingest_json(&site.db, &batches);
        assert_eq!(code, 0, "{lines:?}");
        for line in &lines {
            assert_eq!(line["outcome"], "processed", "{line}");
            assert_eq!(line["invalid"], 0, "{line}");
            assert_eq!(line["conflicts"], 0, "{line}");
        }
        let mut command = site.run_command();
        command
            .args(["--settle", "100ms"])
            .env("SPOOLITE_DEFAULTS_FILE", &defaults);
        let mut daemon = site.spawn(&mut command);
        daemon.wait_serving(&site);
        DocsSite {
            site,
            _daemon: daemon,
            defaults,
        }
    }

    fn root(&self) -> &Path {
        self.site.dir.path()
    }

    /// `line` as it runs on this site: the packaged paths made the site's.
    fn localise(&self, line: &str) -> String {
        let root = self.root().display().to_string();
        let line = line.strip_prefix("sudo -u spoolite ").unwrap_or(line);
        line.replace("/var/lib/spoolite/", &format!("{root}/"))
            .replace("/var/spool/spoolite", &format!("{root}/spool"))
            .replace("/var/backups/spoolite/", &format!("{root}/backups/"))
    }

    /// Runs `line` through `sh` in the site's folder: (exit code, stdout, stderr).
    fn run(&self, line: &str) -> (i32, String, String) {
        let binary = Path::new(env!("CARGO_BIN_EXE_spoolite"));
        let path = format!(
            "{}:{}",
            binary.parent().expect("binary's folder").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // spoolite() clears RUST_LOG and every SPOOLITE_* variable of the runner's.
        let program = spoolite();
        let mut command = Command::new("sh");
        for (key, value) in program.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let output = command
            .arg("-c")
            .arg(self.localise(line))
            .current_dir(self.root())
            .env("PATH", path)
            .env("SPOOLITE_DEFAULTS_FILE", &self.defaults)
            .env_remove("COLUMNS")
            .output()
            .expect("run sh");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

// ---------------------------------------------------------------------------------
// Commands

/// One command of a block, with the output shown after it (console blocks only).
struct Example {
    command: String,
    shown: Option<Vec<String>>,
}

/// The commands of a ```console or ```sh block, continuation lines joined.
fn examples(block: &Block) -> Vec<Example> {
    let console = block.language() == "console";
    let mut found: Vec<Example> = Vec::new();
    let mut lines = block.text.lines();
    while let Some(line) = lines.next() {
        let command = if console {
            match line.strip_prefix("$ ") {
                Some(command) => command,
                None => {
                    if let Some(shown) = found.last_mut().and_then(|e| e.shown.as_mut()) {
                        shown.push(line.to_owned());
                    }
                    continue;
                }
            }
        } else {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            trimmed
        };
        let mut command = command.to_owned();
        while command.ends_with('\\') {
            command.pop();
            match lines.next() {
                Some(next) => command.push_str(next.trim_start_matches("> ")),
                None => break,
            }
        }
        found.push(Example {
            command,
            shown: console.then(Vec::new),
        });
    }
    found
}

/// Whether the test runs `command` (see the module's rules).
fn runs(command: &str) -> bool {
    let command = command.strip_prefix("sudo -u spoolite ").unwrap_or(command);
    let mut words = command.split_whitespace();
    match words.next() {
        Some("spoolite") => {}
        Some("sqlite3" | "gzip") => return true,
        _ => return false,
    }
    words.next() != Some("run")
        && !command.contains("--follow")
        && !command.contains("postgres://")
        && !command.contains("postgresql://")
}

/// The exit code a command's trailing comment gives (`# exits 1: …`), else 0.
fn expected_exit(command: &str) -> i32 {
    let Some((_, comment)) = command.rsplit_once(" #") else {
        return 0;
    };
    let words: Vec<&str> = comment
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .find(|pair| pair[0] == "exit" || pair[0] == "exits")
        .and_then(|pair| pair[1].parse().ok())
        .unwrap_or(0)
}

#[test]
fn every_command_in_the_readme_and_the_guides_runs_as_shown() {
    let site = DocsSite::new();
    let mut ran = 0;
    let mut compared = 0;
    for (page, text) in pages() {
        for block in blocks(&text) {
            if !matches!(block.language(), "console" | "sh") {
                continue;
            }
            for example in examples(&block) {
                if !runs(&example.command) {
                    continue;
                }
                let place = format!("{page}:{} `{}`", block.line, example.command);
                let (code, stdout, stderr) = site.run(&example.command);
                ran += 1;
                assert_eq!(
                    code,
                    expected_exit(&example.command),
                    "{place}: exit {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
                );
                let Some(shown) = example.shown.filter(|s| !s.is_empty()) else {
                    continue;
                };
                if block.says("varies") {
                    continue;
                }
                let got: Vec<&str> = stdout.lines().collect();
                let (want, whole) = match shown.split_last() {
                    Some((last, above)) if last == "…" => (above, false),
                    _ => (&shown[..], true),
                };
                let got = if whole {
                    &got[..]
                } else {
                    &got[..want.len().min(got.len())]
                };
                assert_eq!(
                    got, want,
                    "{place}: the output differs from the page's\nstdout:\n{stdout}\nstderr:\n{stderr}"
                );
                compared += 1;
            }
        }
    }
    assert!(
        ran >= 10 && compared >= 3,
        "{ran} commands ran, {compared} compared"
    );
}

#[test]
fn a_block_that_shows_an_example_file_shows_it_as_it_is() {
    let mut shown = 0;
    for (page, text) in pages() {
        for block in blocks(&text) {
            let Some(name) = block
                .info
                .split_whitespace()
                .find_map(|word| word.strip_prefix("file="))
            else {
                continue;
            };
            let file = fs::read_to_string(repo().join("docs/examples").join(name))
                .unwrap_or_else(|e| panic!("{page}:{}: docs/examples/{name}: {e}", block.line));
            assert_eq!(
                block.text, file,
                "{page}:{}: the block differs from docs/examples/{name}",
                block.line
            );
            shown += 1;
        }
    }
    assert!(shown >= 2, "{shown}");
}

#[test]
fn the_rules_for_commands_are_as_the_module_says() {
    assert!(runs("spoolite status"));
    assert!(runs("sudo -u spoolite spoolite check --quick"));
    assert!(runs("sqlite3 -readonly spoolite.db 'SELECT 1'"));
    assert!(runs("gzip -k docs/examples/ops-2026-11-30.ndjson"));
    assert!(!runs("spoolite run --spool x"));
    assert!(!runs("spoolite changes --follow"));
    assert!(!runs("spoolite copy-db --from a --to 'postgresql://h/db'"));
    assert!(!runs("journalctl -u spoolite"));
    assert_eq!(
        expected_exit("spoolite ftl   # exits 1: a window exceeded"),
        1
    );
    assert_eq!(expected_exit("spoolite status  # exit 3 with no daemon"), 3);
    assert_eq!(expected_exit("spoolite ftl --crew C123   # EASA, now"), 0);
    let block = &blocks("```console varies\n$ spoolite a \\\n  --b\nout\n…\n$ x\n```\n")[0];
    assert!(block.says("varies"));
    let found = examples(block);
    assert_eq!(found[0].command, "spoolite a   --b");
    assert_eq!(
        found[0].shown.as_deref(),
        Some(&["out".to_owned(), "…".to_owned()][..])
    );
    assert_eq!(found[1].command, "x");
}

/// GitHub's anchor of a heading: lowercase, spaces as `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_link_between_the_pages_leads_to_a_file_and_a_heading() {
    let mut checked = 0;
    for (page, text) in pages() {
        let dir = repo()
            .join(&page)
            .parent()
            .expect("page's folder")
            .to_owned();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let target = &rest[..rest.find(')').expect("a link's end")];
            if target.contains("://") || target.starts_with('#') {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = dir.join(file);
            assert!(path.exists(), "{page}: {target}: no such file");
            if !fragment.is_empty() {
                let linked = fs::read_to_string(&path).expect("read the linked page");
                let anchors: Vec<String> = linked
                    .lines()
                    .filter(|line| line.starts_with('#'))
                    .filter_map(|line| line.trim_start_matches('#').strip_prefix(' '))
                    .map(anchor)
                    .collect();
                assert!(
                    anchors.iter().any(|a| a == fragment),
                    "{page}: {target}: no such heading"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked}");
}

// ---------------------------------------------------------------------------------
// SQL

/// The statements of every ```sql block of the README and the guides, split at `;`
/// ending a line: (page, statement).
fn sql_statements() -> Vec<(String, String)> {
    let mut statements = Vec::new();
    for (page, text) in pages() {
        for block in blocks(&text) {
            if block.language() != "sql" {
                continue;
            }
            statements.extend(
                block
                    .text
                    .split(";\n")
                    .map(|sql| sql.trim().trim_end_matches(';').trim())
                    .filter(|sql| !sql.is_empty())
                    .map(|sql| (page.clone(), sql.to_owned())),
            );
        }
    }
    statements
}

#[test]
fn every_sql_statement_in_the_readme_and_the_guides_runs_on_a_real_database() {
    let site = Site::new();
    fs::create_dir_all(site.db.parent().expect("parent")).expect("mkdir state");
    let batches: Vec<PathBuf> = EXAMPLE_BATCHES
        .iter()
        .map(|b| repo().join("docs/examples").join(b))
        .collect();
    let batches: Vec<&Path> = batches.iter().map(PathBuf::as_path).collect();
    let (code, lines) = ingest_json(&site.db, &batches);
    assert_eq!(code, 0, "{lines:?}");

    let statements = sql_statements();
    assert!(statements.len() >= 10, "{statements:?}");
    assert!(
        statements.iter().any(|(page, _)| page == "README.md"),
        "the README has SQL (the tour queries the database)"
    );
    // `query` panics with the statement when SQLite refuses it.
    for (page, sql) in &statements {
        assert!(
            !query(&site.db, &format!("EXPLAIN {sql}")).is_empty(),
            "{page}: {sql}"
        );
        query(&site.db, sql);
    }
    // Written the plain way, and the plain way is the fast way: no planner hint, and
    // no statement reads the event table or a crew table row by row. Allowed: a
    // scan of an index that covers the query (a count's: one pass over a narrow
    // index), and a walk of an index in the order asked for up to a LIMIT.
    for (page, sql) in &statements {
        assert!(!sql.contains("CROSS JOIN"), "{page}: {sql}");
        assert!(!sql.contains("INDEXED BY"), "{page}: {sql}");
        let plan = query(&site.db, &format!("EXPLAIN QUERY PLAN {sql}"));
        for step in plan.iter().map(|row| row[3].as_str()) {
            let of_storage = ["spoolite_event", "spoolite_crew", " e", " d", " s", " c"]
                .iter()
                .any(|t| step.contains(t));
            let allowed = step.contains("COVERING INDEX")
                || step.contains("VIRTUAL TABLE")
                || (step.contains("USING INDEX") && sql.contains("LIMIT"));
            assert!(
                !(step.starts_with("SCAN") && of_storage && !allowed),
                "{page}: {sql}: {step}"
            );
        }
    }
    // The look-up by key finds the row the view shows for that key.
    let (_, by_key) = statements
        .iter()
        .find(|(_, sql)| sql.contains("WHERE idempotency_key = '"))
        .expect("a guide looks a row up by key");
    let row = query(
        &site.db,
        "SELECT * FROM duty_event_all WHERE flight_id = 'BA0117-20261129'
         AND event_kind = 'off_blocks'",
    );
    assert_eq!(row.len(), 1);
    assert!(
        by_key.contains(&row[0][0]),
        "{by_key} looks up {}",
        row[0][0]
    );
    assert_eq!(query(&site.db, by_key), row);
}

// ---------------------------------------------------------------------------------
// docs/reference.md

/// `spoolite ARGS --help` as the reference shows it: no `COLUMNS`, no variable of
/// the runner's, an empty site defaults file.
fn help_page(args: &[&str], defaults: &Path) -> String {
    let output = spoolite()
        .args(args)
        .arg("--help")
        .env_remove("COLUMNS")
        .env("SPOOLITE_DEFAULTS_FILE", defaults)
        .output()
        .expect("run spoolite --help");
    assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

/// The commands a help page lists under `Commands:`, `help` left out.
fn listed_commands(page: &str) -> Vec<String> {
    page.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// What docs/reference.md must hold: every command's and subcommand's `--help`,
/// found from `spoolite --help` down, so that a new command cannot be missed.
fn reference() -> (String, Vec<(String, String)>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let defaults = dir.path().join("defaults.env");
    fs::write(&defaults, "").expect("write defaults file");
    let mut pages: Vec<(Vec<String>, String)> = Vec::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = queue.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let page = help_page(&args, &defaults);
        let subcommands = listed_commands(&page);
        for sub in subcommands.iter().rev() {
            let mut next = path.clone();
            next.push(sub.clone());
            queue.push(next);
        }
        pages.push((path, page));
    }
    let mut text = String::from(
        "# spoolite: command reference\n\n\
         <!-- Generated from the binary by tests/it/docs.rs: do not edit by hand. After a\n\
         change to any --help text, run `SPOOLITE_BLESS=1 cargo test --test it docs::`. -->\n\n\
         Every command's `--help`, exactly as `spoolite` prints it (with `COLUMNS` unset and\n\
         no `SPOOLITE_*` variable set). `-h` prints a shorter form of each. Every option\n\
         `--some-thing` also reads `SPOOLITE_SOME_THING`; the guides say what each command\n\
         is for: [operating](operating.md), [analysing](analysing.md),\n\
         [sending](sending.md).\n\n",
    );
    for (path, _) in &pages {
        let name = std::iter::once("spoolite")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let anchor = name.replace(' ', "-");
        text.push_str(&format!("- [`{name}`](#{anchor})\n"));
    }
    let mut shown = Vec::new();
    for (path, page) in pages {
        let name = std::iter::once("spoolite")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        text.push_str(&format!(
            "\n## {name}\n\n```text\n$ {name} --help\n{page}```\n"
        ));
        shown.push((name, page));
    }
    (text, shown)
}

#[test]
fn the_reference_is_every_help_page_as_the_binary_prints_it() {
    let (want, pages) = reference();
    let path = repo().join("docs/reference.md");
    if std::env::var_os("SPOOLITE_BLESS").is_some_and(|v| v == "1") {
        fs::write(&path, &want).expect("write docs/reference.md");
    }
    let have = fs::read_to_string(&path).unwrap_or_default();
    let names: Vec<&str> = pages.iter().map(|(name, _)| name.as_str()).collect();
    for name in [
        "spoolite",
        "spoolite run",
        "spoolite ftl plan",
        "spoolite ftl explain",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    for (name, page) in &pages {
        assert!(
            have.contains(page.as_str()),
            "docs/reference.md lacks `{name} --help` as the binary prints it; run \
             SPOOLITE_BLESS=1 cargo test --test it docs:: to write it again"
        );
    }
    assert!(
        have == want,
        "docs/reference.md is not what the binary's --help pages make; run \
         SPOOLITE_BLESS=1 cargo test --test it docs:: to write it again"
    );
}

/// How long a daemon may take to take a file in the tests below.
const WAIT: Duration = Duration::from_secs(20);

#[test]
fn the_tours_drop_goes_in_as_the_readme_says() {
    let site = Site::new();
    let mut daemon = site.spawn(site.run_command().args(["--settle", "100ms"]));
    daemon.wait_serving(&site);
    // Uploaded as the tour uploads it, under a temporary name, then renamed; then
    // the same bytes again under another name.
    let incoming = site.incoming();
    for name in ["ops-2026-11-30.ndjson", "ops-again.ndjson"] {
        let part = incoming.join(format!("{name}.part"));
        fs::copy(repo().join("docs/examples/ops-2026-11-30.ndjson"), &part)
            .expect("copy into incoming/");
        fs::rename(&part, incoming.join(name)).expect("rename");
    }
    daemon.wait(WAIT, "both files logged", || {
        let log = site.log();
        log.contains("processed ops-2026-11-30.ndjson ")
            && log.contains("skipped_duplicate ops-again.ndjson ")
    });
    let log = site.log();
    let processed = log
        .lines()
        .find(|line| line.contains("processed ops-2026-11-30.ndjson "))
        .expect("the processed line");
    assert!(processed.contains(" inserted=38 "), "{processed}");
    assert_eq!(
        site.archived(),
        ["ops-2026-11-30.ndjson", "ops-again.ndjson"]
    );
    let readme = fs::read_to_string(repo().join("README.md")).expect("read README.md");
    assert!(
        readme.contains("`processed ops-2026-11-30.ndjson … inserted=38`")
            && readme.contains("it is `skipped_duplicate`"),
        "the tour says what the log says"
    );
}
