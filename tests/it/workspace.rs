//! The product package builds one binary, `spoolite`: the benchmark (`bench/`) and
//! what it shares with the tests (`testkit/`) are workspace members of their own,
//! so that `cargo install`, `cargo build --release` and the `.deb` carry `spoolite`
//! alone. Read from `cargo metadata`, as cargo itself sees the manifests.

use std::process::Command;

use serde_json::Value;

/// `cargo metadata --no-deps` of the workspace.
fn metadata() -> Value {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

fn package<'m>(metadata: &'m Value, name: &str) -> &'m Value {
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|package| package["name"] == name)
        .unwrap_or_else(|| panic!("no package {name} in the workspace"))
}

/// The names of `package`'s targets of kind `kind`.
fn targets(package: &Value, kind: &str) -> Vec<String> {
    package["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter(|target| {
            target["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == kind))
        })
        .map(|target| target["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[test]
fn the_product_package_builds_one_binary() {
    let metadata = metadata();
    let spoolite = package(&metadata, "spoolite");
    assert_eq!(targets(spoolite, "bin"), ["spoolite"]);

    // `cargo build` in the repository builds the product package alone.
    let default_members: Vec<&Value> = metadata["workspace_default_members"]
        .as_array()
        .expect("workspace_default_members")
        .iter()
        .collect();
    assert_eq!(default_members, [&spoolite["id"]]);

    // Every other member is a tool: never published, and the product needs none
    // of them to build (the test kit is a dev-dependency, for the tests).
    let mut others: Vec<&str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|package| package["name"] != "spoolite")
        .map(|package| {
            assert_eq!(
                package["publish"],
                serde_json::json!([]),
                "{} is published (`publish = false` expected)",
                package["name"]
            );
            package["name"].as_str().expect("a name")
        })
        .collect();
    others.sort();
    assert_eq!(others, ["spoolite-bench", "spoolite-testkit"]);
    for dependency in spoolite["dependencies"].as_array().expect("dependencies") {
        if others.contains(&dependency["name"].as_str().expect("a name")) {
            assert_eq!(
                dependency["kind"], "dev",
                "spoolite depends on {} to build",
                dependency["name"]
            );
        }
    }
    assert_eq!(
        targets(package(&metadata, "spoolite-bench"), "bin"),
        ["spoolite-bench"]
    );

    // The package's one binary is the one program the .deb installs.
    let installed: Vec<&str> = spoolite["metadata"]["deb"]["assets"]
        .as_array()
        .expect("package.metadata.deb.assets")
        .iter()
        .filter(|asset| asset[1] == "usr/bin/")
        .map(|asset| asset[0].as_str().expect("a source path"))
        .collect();
    assert_eq!(installed, ["target/release/spoolite"]);
}
