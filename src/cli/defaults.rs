//! The site defaults file (`/etc/default/spoolite`, or the one
//! `SPOOLITE_DEFAULTS_FILE` names): which of its settings a command takes, and
//! what to change in the environment before the command line is parsed.

use std::ffi::OsString;
use std::path::PathBuf;

use super::envfile::{Entry, parse_environment_file};

/// The site defaults file of a packaged host: the package's conffile, which the
/// unit reads as its `EnvironmentFile=`.
pub(crate) const DEFAULTS_FILE: &str = "/etc/default/spoolite";

/// The variable that names another defaults file (tests, a second site).
pub(crate) const DEFAULTS_FILE_VARIABLE: &str = "SPOOLITE_DEFAULTS_FILE";

/// The commands that read the defaults file: one-shot commands an operator types on
/// a packaged host. `run` does not: its unit hands it its environment.
const COMMANDS_READING_DEFAULTS: [&str; 6] =
    ["status", "ingest", "changes", "ftl", "backup", "check"];

/// What the defaults file gave, for `status` to say where its settings came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Defaults {
    /// The file read, when one was.
    pub(crate) file: Option<PathBuf>,
    /// The variables it set: those of the command that the environment left unset.
    pub(crate) applied: Vec<String>,
    /// What to warn of on stderr: a default file that exists but cannot be read, and
    /// each line of the file that is not used (`FILE:LINE: why`).
    pub warnings: Vec<String>,
    /// Why the command must not run: `SPOOLITE_DEFAULTS_FILE` names a file that
    /// cannot be read (exit 2).
    pub fatal: Option<String>,
}

/// What to change in the environment before clap reads it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EnvironmentPlan {
    /// `SPOOLITE_*` variables set to the empty string: an empty value means unset.
    pub unset: Vec<String>,
    /// Variables to set from the defaults file.
    pub set: Vec<(String, String)>,
    pub defaults: Defaults,
}

/// Works out, from the command line and the environment, which empty `SPOOLITE_*`
/// variables to remove and which ones the defaults file fills in (for the commands
/// that read it). Reads the defaults file; changes nothing.
pub fn plan_environment(
    args: &[OsString],
    environment: &[(OsString, OsString)],
    cli: &clap::Command,
) -> EnvironmentPlan {
    let mut plan = EnvironmentPlan::default();
    for (key, value) in environment {
        let key = key.to_string_lossy();
        if key.starts_with("SPOOLITE_") && value.is_empty() {
            plan.unset.push(key.into_owned());
        }
    }
    let named = environment
        .iter()
        .find(|(key, value)| key == DEFAULTS_FILE_VARIABLE && !value.is_empty())
        .map(|(_, value)| PathBuf::from(value));
    // `run` reads a defaults file only when one is named: its unit hands it
    // /etc/default/spoolite, and a daemon started by hand in a test folder must not
    // serve the packaged site's spool.
    let reads_defaults = |command: &str| {
        COMMANDS_READING_DEFAULTS.contains(&command) || (command == "run" && named.is_some())
    };
    let command = args.get(1).map(|a| a.to_string_lossy());
    let Some(command) = command.filter(|c| reads_defaults(c)) else {
        return plan;
    };
    let file = named
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULTS_FILE));
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if named.is_some() => {
            plan.defaults.fatal = Some(format!(
                "read the defaults file {} (named by {DEFAULTS_FILE_VARIABLE}): {e}; \
                 name a file that exists, or unset {DEFAULTS_FILE_VARIABLE} to read {DEFAULTS_FILE}",
                file.display()
            ));
            return plan;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return plan,
        Err(e) => {
            let warning = format!("read the defaults file {}: {e}", file.display());
            plan.defaults.warnings.push(warning);
            plan.defaults.file = Some(file);
            return plan;
        }
    };
    let is_set = |name: &str| {
        environment
            .iter()
            .any(|(key, value)| key == name && !value.is_empty())
    };
    let (values, warnings) = site_settings(&parse_environment_file(&bytes), &command, cli);
    for warning in warnings {
        plan.defaults
            .warnings
            .push(format!("{}:{warning}", file.display()));
    }
    for (name, value) in values {
        if !value.is_empty() && !is_set(&name) && !given(args, cli, &command, &name) {
            plan.defaults.applied.push(name.clone());
            plan.set.push((name, value));
        }
    }
    plan.defaults.file = Some(file);
    plan
}

/// Whether the command line gives the option that reads the variable `name`
/// (`--spool X` or `--spool=X`): it wins over the variable, so the defaults file
/// sets nothing there.
fn given(args: &[OsString], cli: &clap::Command, command: &str, name: &str) -> bool {
    let long = cli
        .find_subcommand(command)
        .into_iter()
        .flat_map(|sub| sub.get_arguments())
        .find(|arg| arg.get_env().is_some_and(|env| env == name))
        .and_then(|arg| arg.get_long());
    let Some(long) = long else {
        return false;
    };
    let flag = format!("--{long}");
    args.iter().skip(2).any(|arg| {
        let arg = arg.to_string_lossy();
        arg == flag || arg.starts_with(&format!("{flag}="))
    })
}

/// The settings of `command` among a defaults file's entries (a later assignment of
/// a name wins), and what to warn of (`LINE: why`): each problem of the file, each
/// `SPOOLITE_*` name that no option of any command reads (a typo), and
/// `SPOOLITE_DEFAULTS_FILE`, which only the environment sets. Other names
/// (`RUST_LOG`) and the settings of other commands (the daemon's `SPOOLITE_SETTLE`)
/// are left to whoever reads them.
fn site_settings(
    entries: &[Entry],
    command: &str,
    cli: &clap::Command,
) -> (Vec<(String, String)>, Vec<String>) {
    let known = variables_of(cli, None);
    let read = variables_of(cli, Some(command));
    let mut values: Vec<(String, String)> = Vec::new();
    let mut warnings = Vec::new();
    for entry in entries {
        let (line, name, value) = match entry {
            Entry::Problem { line, why } => {
                warnings.push(format!("{line}: {why}"));
                continue;
            }
            Entry::Assignment { line, name, value } => (line, name, value),
        };
        if !name.starts_with("SPOOLITE_") {
            continue;
        }
        if name == DEFAULTS_FILE_VARIABLE {
            warnings.push(format!(
                "{line}: {name} names the defaults file, so only the environment sets it; ignored"
            ));
        } else if !known.contains(name) {
            warnings.push(format!(
                "{line}: {name} is no setting of spoolite (no option reads it: a typo?); ignored"
            ));
        } else if read.contains(name) {
            values.retain(|(known, _)| known != name);
            values.push((name.clone(), value.clone()));
        }
    }
    (values, warnings)
}

/// The variables of the options of the command `name`, or of every command.
fn variables_of(cli: &clap::Command, name: Option<&str>) -> Vec<String> {
    cli.get_subcommands()
        .filter(|sub| name.is_none_or(|name| sub.get_name() == name))
        .flat_map(|sub| sub.get_arguments())
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::cli::Cli;

    /// The plan of the real command line.
    fn planned(args: &[OsString], environment: &[(OsString, OsString)]) -> EnvironmentPlan {
        plan_environment(args, environment, &Cli::command())
    }

    fn os(items: &[&str]) -> Vec<OsString> {
        items.iter().map(OsString::from).collect()
    }

    fn env(items: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        items
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn a_defaults_file_sets_the_commands_own_variables_and_reports_the_rest() {
        let text = b"SPOOLITE_DB=/a\nSPOOLITE_BOGUS=1\nSPOOLITE_SETTLE=5s\nRUST_LOG=debug\n\
                     SPOOLITE_DEFAULTS_FILE=/other\nSPOOLITE_DB=/b\nSPOOLITE_JSON=\n";
        let (values, warnings) =
            site_settings(&parse_environment_file(text), "status", &Cli::command());
        // A later assignment wins; the daemon's SPOOLITE_SETTLE and RUST_LOG are not
        // status's to take, nor to warn of.
        assert_eq!(
            values,
            [("SPOOLITE_DB", "/b"), ("SPOOLITE_JSON", "")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(
            warnings,
            [
                "2: SPOOLITE_BOGUS is no setting of spoolite (no option reads it: a typo?); ignored",
                "5: SPOOLITE_DEFAULTS_FILE names the defaults file, so only the environment sets \
                 it; ignored",
            ]
        );
    }

    #[test]
    fn the_defaults_file_fills_in_what_the_environment_leaves_unset() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("spoolite");
        std::fs::write(
            &file,
            "SPOOLITE_SPOOL=/srv/spool\nSPOOLITE_DB=/srv/db\nSPOOLITE_JSON=yes\nRUST_LOG=debug\n\
             SPOOLITE_TYPO=1\n",
        )
        .expect("write defaults");
        let file_text = file.to_string_lossy().into_owned();
        let environment = env(&[
            ("SPOOLITE_DEFAULTS_FILE", &file_text),
            ("SPOOLITE_DB", "/mine.db"),
            ("SPOOLITE_JSON", ""),
        ]);
        let plan = planned(&os(&["spoolite", "status"]), &environment);
        assert_eq!(plan.unset, ["SPOOLITE_JSON"]);
        assert_eq!(
            plan.set,
            [("SPOOLITE_SPOOL", "/srv/spool"), ("SPOOLITE_JSON", "yes")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(plan.defaults.applied, ["SPOOLITE_SPOOL", "SPOOLITE_JSON"]);
        assert_eq!(plan.defaults.file.as_deref(), Some(file.as_path()));
        assert_eq!(
            plan.defaults.warnings,
            [format!(
                "{file_text}:5: SPOOLITE_TYPO is no setting of spoolite (no option reads it: a \
                 typo?); ignored"
            )]
        );
        assert_eq!(plan.defaults.fatal, None);
        // An option on the command line wins over the file: it is not taken from it.
        let plan = planned(
            &os(&["spoolite", "status", "--spool", "/mine"]),
            &environment,
        );
        assert_eq!(plan.defaults.applied, ["SPOOLITE_JSON"]);
        let plan = planned(&os(&["spoolite", "status", "--json=no"]), &environment);
        assert_eq!(plan.defaults.applied, ["SPOOLITE_SPOOL"]);
        // `key` needs no site.
        let plan = planned(&os(&["spoolite", "key"]), &environment);
        assert!(plan.set.is_empty() && plan.defaults == Defaults::default());
        assert_eq!(plan.unset, ["SPOOLITE_JSON"]);
        // `run` takes its environment from its unit, and a file only when one is
        // named: then the settings it has an option for.
        let plan = planned(&os(&["spoolite", "run"]), &environment);
        assert_eq!(plan.defaults.applied, ["SPOOLITE_SPOOL"]);
        assert_eq!(plan.defaults.file.as_deref(), Some(file.as_path()));
        let unnamed: Vec<_> = environment
            .iter()
            .filter(|(key, _)| key != DEFAULTS_FILE_VARIABLE)
            .cloned()
            .collect();
        let plan = planned(&os(&["spoolite", "run"]), &unnamed);
        assert!(plan.set.is_empty() && plan.defaults == Defaults::default());
        // `changes` reads the site's database like `status` does, and only what it
        // has an option for.
        let unset = env(&[("SPOOLITE_DEFAULTS_FILE", &file_text)]);
        let plan = planned(&os(&["spoolite", "changes", "--follow"]), &unset);
        assert_eq!(plan.defaults.applied, ["SPOOLITE_DB"]);
        // A file named that does not exist stops the command; the packaged one
        // missing does not.
        let missing = env(&[("SPOOLITE_DEFAULTS_FILE", "/nonexistent/spoolite")]);
        let plan = planned(&os(&["spoolite", "ingest"]), &missing);
        assert_eq!(
            plan.defaults.fatal.as_deref(),
            Some(
                "read the defaults file /nonexistent/spoolite (named by SPOOLITE_DEFAULTS_FILE): \
                 No such file or directory (os error 2); name a file that exists, or unset \
                 SPOOLITE_DEFAULTS_FILE to read /etc/default/spoolite"
            )
        );
        assert!(plan.set.is_empty() && plan.defaults.applied.is_empty());
    }
}
