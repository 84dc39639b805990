//! The Debian package (`deploy/build-deb.sh`) is built from the test binary and checked as
//! an operator would meet it: what `dpkg-deb` lists (paths, owners, modes, conffiles,
//! control fields), its maintainer scripts (`sh -n`, shellcheck, and no command that
//! enables or starts the service), lintian with only the overrides the package justifies,
//! the unit against the tree's and `systemd-analyze verify`, and an install, reinstall,
//! remove and purge into a scratch root with `dpkg --root` (maintainer scripts run
//! chroot-less with DPKG_ROOT, so this works without a container).
//!
//! Needs dpkg-dev, lintian, shellcheck and systemd (`.ci/run` installs what is missing);
//! without one the test fails and names the package to install.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const INSTALL: &str = "apt-get install dpkg-dev lintian shellcheck systemd (or run .ci/run)";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}; install it: {INSTALL}"))
}

fn stdout_of(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The package, built once for every test of this file from the debug binary.
fn deb() -> &'static Path {
    static DEB: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = DEB.get_or_init(|| {
        let out = tempfile::tempdir().expect("a directory for the package");
        let printed = stdout_of(
            Command::new(repo().join("deploy/build-deb.sh"))
                .args(["--binary", env!("CARGO_BIN_EXE_jetsink"), "--out"])
                .arg(out.path())
                // xz, the default, takes about a minute of CPU on the debug binary.
                .args(["--compress", "gzip"]),
        );
        let path = PathBuf::from(printed.trim());
        let arch = stdout_of(Command::new("dpkg").arg("--print-architecture"));
        let name = format!("jetsink_{}_{}.deb", env!("CARGO_PKG_VERSION"), arch.trim());
        assert_eq!(path, out.path().join(name), "the package's file name");
        (out, path)
    });
    path
}

/// `dpkg-deb -c`: path → (mode string, owner/group).
fn contents() -> BTreeMap<String, (String, String)> {
    stdout_of(Command::new("dpkg-deb").arg("-c").arg(deb()))
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = f[5].trim_start_matches('.').to_string();
            (path, (f[0].to_string(), f[1].to_string()))
        })
        .collect()
}

#[test]
fn package_holds_binary_unit_conffile_user_setup_and_docs_owned_by_root_with_debian_modes() {
    let files = contents();
    let expected = [
        ("/usr/bin/jetsink", "-rwxr-xr-x"),
        ("/lib/systemd/system/jetsink.service", "-rw-r--r--"),
        ("/etc/jetsink/jetsink.json", "-rw-r--r--"),
        ("/usr/lib/sysusers.d/jetsink.conf", "-rw-r--r--"),
        ("/usr/lib/tmpfiles.d/jetsink.conf", "-rw-r--r--"),
        ("/usr/share/doc/jetsink/copyright", "-rw-r--r--"),
        ("/usr/share/doc/jetsink/changelog.gz", "-rw-r--r--"),
        ("/usr/share/doc/jetsink/README.md.gz", "-rw-r--r--"),
        ("/usr/share/doc/jetsink/configuration.md.gz", "-rw-r--r--"),
        ("/usr/share/doc/jetsink/operations.md.gz", "-rw-r--r--"),
        ("/usr/share/lintian/overrides/jetsink", "-rw-r--r--"),
    ];
    let regular: BTreeMap<&str, &str> = files
        .iter()
        .filter(|(_, (mode, _))| !mode.starts_with('d'))
        .map(|(p, (mode, _))| (p.as_str(), mode.as_str()))
        .collect();
    assert_eq!(regular, BTreeMap::from(expected), "the package's files");
    for (path, (mode, owner)) in &files {
        assert_eq!(owner, "root/root", "{path}: owner");
        if mode.starts_with('d') {
            assert_eq!(mode, "drwxr-xr-x", "{path}: directory mode");
        }
    }
    assert!(
        !files.keys().any(|p| p.starts_with("/usr/local")),
        "nothing in /usr/local"
    );

    let conffiles = stdout_of(
        Command::new("dpkg-deb")
            .arg("-I")
            .arg(deb())
            .arg("conffiles"),
    );
    assert_eq!(conffiles, "/etc/jetsink/jetsink.json\n");
}

#[test]
fn control_names_the_package_version_arch_and_the_libraries_and_sysusers_it_needs() {
    let field = |name: &str| {
        stdout_of(Command::new("dpkg-deb").arg("-f").arg(deb()).arg(name))
            .trim()
            .to_string()
    };
    assert_eq!(field("Package"), "jetsink");
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    let arch = stdout_of(Command::new("dpkg").arg("--print-architecture"));
    assert_eq!(field("Architecture"), arch.trim());
    let depends = field("Depends");
    assert!(depends.contains("libc6 (>="), "Depends: {depends}");
    assert!(
        depends.contains("systemd | systemd-sysusers"),
        "postinst runs systemd-sysusers; Depends: {depends}"
    );
    assert!(field("Maintainer").contains('@'));
    assert!(field("Installed-Size").parse::<u64>().unwrap_or(0) > 0);
    assert!(!field("Description").is_empty());
}

/// A maintainer script as packaged.
fn script(name: &str) -> String {
    stdout_of(Command::new("dpkg-deb").arg("-I").arg(deb()).arg(name))
}

#[test]
fn maintainer_scripts_parse_pass_shellcheck_and_never_enable_or_start_the_service() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["postinst", "prerm", "postrm"] {
        let text = script(name);
        let path = dir.path().join(name);
        std::fs::write(&path, &text).unwrap();
        stdout_of(Command::new("sh").arg("-n").arg(&path));
        stdout_of(Command::new("shellcheck").args(["--shell=sh"]).arg(&path));
        assert!(text.starts_with("#!/bin/sh\n"), "{name}: #!/bin/sh");
        assert!(text.contains("\nset -e\n"), "{name}: set -e");
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') {
                continue;
            }
            // The only service actions: stop on removal, restart on upgrade of one that
            // runs, and an `enable` that only re-creates links the operator made.
            if line.contains("deb-systemd-invoke") {
                assert!(
                    line.contains("invoke try-restart") || line.contains("invoke stop"),
                    "{name}: {line}"
                );
            }
            if line.contains("systemctl") {
                assert!(line.contains("daemon-reload"), "{name}: {line}");
            }
            if line.contains("deb-systemd-helper enable") {
                assert!(text.contains("was-enabled"), "{name}: {line}");
            }
        }
    }
    // deb-systemd-helper's was-enabled answers yes for a unit it has never seen, so an
    // `enable` outside the debian-installed check would enable the unit on first install.
    let postinst = script("postinst");
    let installed = postinst.find("debian-installed").unwrap_or(usize::MAX);
    let enable = postinst.find("deb-systemd-helper enable").unwrap_or(0);
    assert!(
        installed < enable,
        "enable outside the debian-installed check"
    );
}

/// Every non-comment line of the tree's unit, with the binary where the package puts it.
fn unit_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.replace("/usr/local/bin/jetsink", "/usr/bin/jetsink"))
        .collect()
}

/// The value of `Key=` in a unit (the last one).
fn unit_value(lines: &[String], key: &str) -> String {
    let prefix = format!("{key}=");
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .next_back()
        .unwrap_or_else(|| panic!("the unit sets no {key}="))
        .to_string()
}

/// The package's files, unpacked (no scripts run).
fn unpacked() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    stdout_of(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb())
            .arg(dir.path()),
    );
    dir
}

#[test]
fn packaged_unit_is_the_trees_and_agrees_with_the_user_state_dir_and_config_it_installs() {
    let root = unpacked();
    let packaged = std::fs::read_to_string(root.path().join("lib/systemd/system/jetsink.service"))
        .expect("the unit");
    let tree = std::fs::read_to_string(repo().join("deploy/jetsink.service")).unwrap();
    assert_eq!(
        packaged,
        tree.replace("/usr/local/bin/jetsink", "/usr/bin/jetsink"),
        "the packaged unit differs from deploy/jetsink.service by more than the binary's path"
    );
    let lines = unit_lines(&packaged);
    let exec = unit_value(&lines, "ExecStart");
    assert!(
        exec.starts_with("/usr/bin/jetsink run --config /etc/jetsink/jetsink.json"),
        "ExecStart={exec}: the binary and the conffile the package installs"
    );
    let sysusers =
        std::fs::read_to_string(root.path().join("usr/lib/sysusers.d/jetsink.conf")).unwrap();
    let user_line = unit_lines(&sysusers).join("\n");
    assert!(user_line.starts_with("u jetsink "), "{user_line}");
    assert_eq!(unit_value(&lines, "User"), "jetsink");
    assert_eq!(unit_value(&lines, "Group"), "jetsink");
    let tmpfiles =
        std::fs::read_to_string(root.path().join("usr/lib/tmpfiles.d/jetsink.conf")).unwrap();
    assert_eq!(
        unit_lines(&tmpfiles),
        ["d /var/lib/jetsink 0750 jetsink jetsink -"]
    );
    assert_eq!(unit_value(&lines, "StateDirectory"), "jetsink");
    assert_eq!(unit_value(&lines, "StateDirectoryMode"), "0750");
    assert_eq!(unit_value(&lines, "WorkingDirectory"), "/var/lib/jetsink");
    assert_eq!(unit_value(&lines, "ReadWritePaths"), "/var/lib/jetsink");
    assert!(
        !lines.iter().any(|l| l.starts_with("LogsDirectory=")),
        "a LogsDirectory= needs the package to create it too"
    );

    // systemd-analyze checks that ExecStart= names an executable: point it at the
    // unpacked binary, and fail on any warning it prints, not only on its exit code.
    let unit_dir = tempfile::tempdir().unwrap();
    let bin = root.path().join("usr/bin/jetsink");
    let copy = packaged.replace("/usr/bin/jetsink", bin.to_str().unwrap());
    let unit = unit_dir.path().join("jetsink.service");
    std::fs::write(&unit, copy).unwrap();
    let out = run(Command::new("systemd-analyze").arg("verify").arg(&unit));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "systemd-analyze verify: {err}"
    );
}

#[test]
fn lintian_finds_no_tag_but_the_overrides_each_justified_by_a_comment() {
    let overrides =
        std::fs::read_to_string(repo().join("deploy/debian/jetsink.lintian-overrides")).unwrap();
    let mut commented = false;
    for line in overrides.lines() {
        if line.starts_with('#') {
            commented = true;
        } else if !line.trim().is_empty() {
            assert!(commented, "override without a reason above it: {line}");
            commented = false;
        }
    }
    let out = run(Command::new("lintian")
        .args(["--pedantic", "--fail-on", "error,warning,info,pedantic"])
        .arg(deb())
        .current_dir(std::env::temp_dir()));
    assert!(
        out.status.success(),
        "lintian:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dpkg` on a scratch root: maintainer scripts run without chroot, with DPKG_ROOT set;
/// the dependencies are the running system's, not the scratch root's.
fn dpkg(root: &Path, args: &[&str]) {
    stdout_of(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args([
                "--force-not-root",
                "--force-script-chrootless",
                "--force-depends",
                "--log=/dev/null",
            ])
            .args(args),
    );
}

/// The numeric id of `name` in a passwd or group file of the scratch root.
fn id_in(file: &Path, name: &str) -> Option<u32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f[0] == name)
        .and_then(|f| f[2].parse().ok())
}

fn am_root() -> bool {
    stdout_of(Command::new("id").arg("-u")).trim() == "0"
}

/// The unit's enablement link, as `systemctl enable` makes it.
fn wants_link(root: &Path) -> PathBuf {
    root.join("etc/systemd/system/multi-user.target.wants/jetsink.service")
}

/// A first install: the user, the state directory and the config's group, the config
/// validates with the packaged binary, and the unit is not enabled.
fn check_first_install(root: &Path) {
    let uid = id_in(&root.join("etc/passwd"), "jetsink").expect("user jetsink");
    let gid = id_in(&root.join("etc/group"), "jetsink").expect("group jetsink");
    let state = std::fs::metadata(root.join("var/lib/jetsink")).expect("/var/lib/jetsink");
    assert_eq!(
        state.permissions().mode() & 0o7777,
        0o750,
        "/var/lib/jetsink"
    );
    let config = root.join("etc/jetsink/jetsink.json");
    let meta = std::fs::metadata(&config).expect("the config");
    assert_eq!(
        meta.permissions().mode() & 0o7777,
        0o640,
        "the config's mode"
    );
    if am_root() {
        assert_eq!((state.uid(), state.gid()), (uid, gid), "/var/lib/jetsink");
        assert_eq!((meta.uid(), meta.gid()), (0, gid), "the config's owner");
    }
    stdout_of(
        Command::new(root.join("usr/bin/jetsink"))
            .args(["validate", "--config"])
            .arg(&config)
            .current_dir(root),
    );
    assert!(
        std::fs::symlink_metadata(wants_link(root)).is_err(),
        "the package enabled the unit"
    );
}

#[test]
fn installs_into_a_scratch_root_disabled_keeps_an_operators_enable_and_purges_only_state() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    let deb = deb().to_str().unwrap().to_string();

    dpkg(root, &["-i", &deb]);
    check_first_install(root);
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();

    // The operator enables it; a reinstall (as an upgrade runs the scripts) keeps that,
    // and creates no second user.
    stdout_of(
        Command::new("systemctl")
            .arg(format!("--root={}", root.display()))
            .args(["enable", "jetsink.service"]),
    );
    assert!(std::fs::symlink_metadata(wants_link(root)).is_ok());
    dpkg(root, &["-i", &deb]);
    assert!(
        std::fs::symlink_metadata(wants_link(root)).is_ok(),
        "an upgrade disabled the unit"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/passwd")).unwrap(),
        passwd
    );

    // remove keeps the data and the config; purge deletes both, and the user stays.
    let data = root.join("var/lib/jetsink/data.db");
    std::fs::write(&data, "rows").unwrap();
    dpkg(root, &["-r", "jetsink"]);
    assert!(data.exists(), "remove deleted the state");
    assert!(root.join("etc/jetsink/jetsink.json").exists());
    assert!(!root.join("usr/bin/jetsink").exists());
    dpkg(root, &["-P", "jetsink"]);
    assert!(
        !root.join("var/lib/jetsink").exists(),
        "purge kept the state"
    );
    assert!(!root.join("etc/jetsink/jetsink.json").exists());
    assert!(id_in(&root.join("etc/passwd"), "jetsink").is_some());
}

#[test]
fn readme_install_section_starts_with_the_package_of_this_version() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split("\n## Install\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README.md has an Install section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block in the Install section");
    let first = block.lines().next().unwrap_or_default();
    assert!(first.starts_with("deploy/build-deb.sh"), "{first}");
    let file = format!("./target/debian/jetsink_{}_", env!("CARGO_PKG_VERSION"));
    for doc in ["README.md", "deploy/README.md"] {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        for line in text.lines().filter(|l| l.contains("apt install ./target")) {
            assert!(line.contains(&file), "{doc}: {line} is not {file}…");
        }
    }
    assert!(block.contains(&format!("sudo apt install {file}")));
    assert!(block.contains("systemctl enable --now jetsink"));
}
