//! What the results were measured on: processors, memory, disk and the commit, for
//! the header of results.md.

use std::path::Path;
use std::process::Command;

/// A few lines of Markdown describing this machine and checkout.
pub fn describe(out: &Path) -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let lines = [
        format!("- processors: {cpus} × {}", cpu_model()),
        format!(
            "- memory: {}",
            meminfo("MemTotal").unwrap_or_else(|| "unknown".into())
        ),
        format!("- disk of {}: {}", out.display(), disk(out)),
        format!("- commit: {}", commit()),
    ];
    lines.join("\n")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown model".into())
}

fn meminfo(field: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|line| line.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(format!("{:.1} GiB", kib as f64 / (1024.0 * 1024.0)))
}

/// The `df` line of the file system holding `path`.
fn disk(path: &Path) -> String {
    output(
        Command::new("df")
            .arg("-h")
            .arg("--output=source,fstype,size,avail")
            .arg(path),
    )
    .and_then(|text| {
        text.lines()
            .nth(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    })
    .unwrap_or_else(|| "unknown".into())
}

/// The checked-out commit, marked when the working tree has changes.
fn commit() -> String {
    let Some(head) = output(Command::new("git").args(["rev-parse", "--short=12", "HEAD"])) else {
        return "unknown (not a git checkout)".into();
    };
    let dirty = output(Command::new("git").args(["status", "--porcelain", "--untracked-files=no"]))
        .is_some_and(|text| !text.trim().is_empty());
    let head = head.trim().to_owned();
    if dirty {
        format!("{head} with uncommitted changes")
    } else {
        head
    }
}

fn output(command: &mut Command) -> Option<String> {
    let output = command.output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}
