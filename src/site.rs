//! `tokentrace site`: a fleet of runs (folders or object-store prefixes) as a static
//! website of plain files: an index, a page per run and a page per model × hardware
//! group. Incremental: a run whose files have not changed since the last build is not
//! scored or written again, and only the groups of changed runs are.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokentrace_analyzer::report::site::{self, Banner, Group, RunRow};
use tokentrace_analyzer::{RuleSet, Verify};
use tokentrace_recorder::store::bucket::{RunStore, is_url};
use tokentrace_schemas::digest::Sha256;
use tokentrace_schemas::fsutil::write_atomic;

/// Arguments of `tokentrace site`.
#[derive(Debug, clap::Args)]
pub struct SiteArgs {
    /// Folders or object-store URLs (s3://bucket/prefix, file:///path) to publish: every
    /// run under them (a folder or prefix holding manifest.json, at any depth).
    #[arg(required = true)]
    pub sources: Vec<String>,
    /// The folder to write the site into (created if missing; a site built there before
    /// is updated: only what changed is written).
    #[arg(long)]
    pub out: PathBuf,
    /// Re-score every run under this rule set (a TOML file or a built-in name) before
    /// publishing; every page says so. Without it, runs are scored under the default.
    #[arg(long)]
    pub rules: Option<String>,
    /// For a public site: drop host names, IP addresses and paths from every page (a
    /// path keeps its last part), and list what was dropped.
    #[arg(long)]
    pub public: bool,
    /// The index page's title.
    #[arg(long, default_value = "Speed test matrices")]
    pub title: String,
}

/// The file in the site's folder that remembers the last build.
pub const STATE_FILE: &str = "tokentrace-site.json";

/// What the last build wrote, for the next one to compare with.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// Everything that changes every page when it changes: tokentrace's version, the
    /// rule set's contents, `--public`, the title.
    build: String,
    /// Per run, by the SHA-256 of where it was found (not the place itself: a public
    /// site names no path): its files' fingerprint and its index row.
    runs: BTreeMap<String, Built>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Built {
    fingerprint: String,
    row: RunRow,
}

/// What one build did.
#[derive(Debug, Default)]
pub struct Summary {
    pub runs: usize,
    pub rendered: usize,
    pub removed: usize,
    pub groups: usize,
    pub groups_rendered: usize,
    pub index_written: bool,
    pub failed: usize,
}

fn sha(bytes: &[u8]) -> String {
    Sha256::of_bytes(bytes).to_string()
}

/// The fingerprint of a run folder: its JSON files (manifest, commit marks, imported
/// figures) by content, every other file by size, and by modification time too where
/// its cell's commit mark records no SHA-256 (runs written before checksums).
fn local_fingerprint(dir: &Path) -> anyhow::Result<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<u8>) -> anyhow::Result<()> {
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("cannot read {}", dir.display()))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let mark = dir.join(tokentrace_schemas::layout::CELL_FILE);
        let checksummed = std::fs::read_to_string(&mark).is_ok_and(|t| t.contains("\"sha256\""));
        for e in entries {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            // The site's own outputs and rescore's results do not change the trace.
            if name.starts_with('.') || (dir == root && name == "results") {
                continue;
            }
            let meta = e
                .metadata()
                .with_context(|| format!("cannot read {}", path.display()))?;
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
            if meta.is_dir() {
                walk(root, &path, out)?;
            } else if name.ends_with(".json") {
                let bytes = std::fs::read(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let _ = writeln!(out, "{rel} {}", sha(&bytes));
            } else if checksummed {
                let _ = writeln!(out, "{rel} {}", meta.len());
            } else {
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                let _ = writeln!(out, "{rel} {} {mtime}", meta.len());
            }
        }
        Ok(())
    }
    let mut material = Vec::new();
    walk(dir, dir, &mut material)?;
    Ok(sha(&material))
}

/// The fingerprint of a run at `location`: a folder's files, or a stored run's object
/// listing (keys, sizes, ETags), read without downloading.
fn fingerprint(location: &str) -> anyhow::Result<String> {
    if !is_url(location) {
        return local_fingerprint(Path::new(location));
    }
    let store = RunStore::open(location)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let listing = rt
        .block_on(store.listing())
        .with_context(|| format!("cannot list {location}"))?;
    Ok(sha(listing.join("\n").as_bytes()))
}

/// The site's paths: `runs/<slug>.html` and `.json`, `groups/<slug>.html`.
fn run_file(out: &Path, slug: &str, ext: &str) -> PathBuf {
    out.join("runs").join(format!("{slug}.{ext}"))
}

fn group_file(out: &Path, slug: &str) -> PathBuf {
    out.join("groups").join(format!("{slug}.html"))
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    write_atomic(path, text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))
}

/// Scores the run at `location`, writes its page and scoring, and returns its row.
fn render_run(
    location: &str,
    slug: &str,
    rules: &RuleSet,
    args: &SiteArgs,
    banner: &Banner,
) -> anyhow::Result<(RunRow, Vec<String>)> {
    let local = crate::remote::local(Path::new(location))?;
    let run = tokentrace_analyzer::Run::open_footers_with(local.dir(), Verify::Checksums)
        .with_context(|| format!("cannot score {location}"))?;
    let (scoring, traces) = tokentrace_analyzer::score::score_run(&run, rules, true)
        .with_context(|| format!("cannot score {location}"))?;
    drop(run);
    let (scoring, dropped) = if args.public {
        let (s, d) = tokentrace_analyzer::public::scrub(&scoring)
            .with_context(|| format!("cannot make {location} public"))?;
        (s, d.iter().map(|d| d.line()).collect())
    } else {
        (scoring, Vec::new())
    };
    let row = site::run_row(&scoring, slug, dropped.clone());
    let report = tokentrace_analyzer::report::html_page(&scoring, &traces);
    write(
        &run_file(&args.out, slug, "html"),
        &site::run_page(&report, &row, banner),
    )?;
    write(
        &run_file(&args.out, slug, "json"),
        &tokentrace_analyzer::report::json(&scoring),
    )?;
    Ok((row, dropped))
}

/// Writes the page of `group`, whose runs are `rows` (any order).
fn render_group(
    out: &Path,
    group: &Group,
    rows: &[&RunRow],
    banner: &Banner,
) -> anyhow::Result<()> {
    let mut rows: Vec<&RunRow> = rows.to_vec();
    rows.sort_by(|a, b| (&a.started_utc, &a.slug).cmp(&(&b.started_utc, &b.slug)));
    let latest = &rows[rows.len().saturating_sub(site::GROUP_MATRICES)..];
    let mut sides = Vec::new();
    for r in latest {
        let path = run_file(out, &r.slug, "json");
        let s = tokentrace_analyzer::diff::read_scoring(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        sides.push((r.label(), s));
    }
    write(
        &group_file(out, &group.slug),
        &site::group_page(group, &rows, &sides, banner),
    )
}

/// `tokentrace site`: exit 0, or 1 when a run could not be published (the site holds
/// the others, and stderr names it).
pub fn run(args: &SiteArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let summary = build(args)?;
    writeln!(
        out,
        "{}: {} runs ({} rendered, {} unchanged, {} removed), {} groups ({} rendered), index {}",
        args.out.display(),
        summary.runs,
        summary.rendered,
        summary.runs - summary.rendered,
        summary.removed,
        summary.groups,
        summary.groups_rendered,
        if summary.index_written {
            "written"
        } else {
            "unchanged"
        }
    )
    .context("cannot write to standard output")?;
    Ok(if summary.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Builds or updates the site; see [`run`].
pub fn build(args: &SiteArgs) -> anyhow::Result<Summary> {
    let rules = RuleSet::load(
        args.rules
            .as_deref()
            .unwrap_or(crate::analyze::DEFAULT_RULES),
    )?;
    let banner = Banner {
        rules: rules.id(),
        rescored: args.rules.is_some(),
        public: args.public,
    };
    let build_key = sha(format!(
        "{}\n{}\n{}\n{}",
        tokentrace_schemas::build::CLI_VERSION,
        serde_json::to_string(&rules).context("cannot encode the rule set")?,
        args.public,
        args.title
    )
    .as_bytes());
    for dir in ["runs", "groups"] {
        let d = args.out.join(dir);
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let state_path = args.out.join(STATE_FILE);
    let old: State = std::fs::read(&state_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|s: &State| s.build == build_key)
        .unwrap_or_default();

    let locations = crate::catalog::find(&args.sources)?;
    if locations.is_empty() {
        anyhow::bail!("no run found under {}", args.sources.join(", "));
    }
    let mut summary = Summary::default();
    let mut state = State {
        build: build_key,
        runs: BTreeMap::new(),
    };
    let mut dirty: BTreeSet<Group> = BTreeSet::new();
    for location in &locations {
        // A folder by its absolute path: the same run keeps its page's address however
        // the folder is named on the command line.
        let canonical = if is_url(location) {
            location.clone()
        } else {
            std::fs::canonicalize(location)
                .map_or_else(|_| location.clone(), |p| p.display().to_string())
        };
        let key = sha(canonical.as_bytes());
        if state.runs.contains_key(&key) {
            continue;
        }
        let fp = match fingerprint(location) {
            Ok(fp) => fp,
            Err(e) => {
                summary.failed += 1;
                eprintln!("tokentrace: {location}: not published: {e:#}");
                continue;
            }
        };
        if let Some(b) = old.runs.get(&key)
            && b.fingerprint == fp
            && run_file(&args.out, &b.row.slug, "html").is_file()
            && run_file(&args.out, &b.row.slug, "json").is_file()
        {
            state.runs.insert(
                key,
                Built {
                    fingerprint: fp,
                    row: b.row.clone(),
                },
            );
            continue;
        }
        let slug = format!("run-{}", &key[..16]);
        match render_run(location, &slug, &rules, args, &banner) {
            Ok((row, dropped)) => {
                for d in &dropped {
                    eprintln!("tokentrace: {location}: dropped {d}");
                }
                summary.rendered += 1;
                dirty.insert(row.group.clone());
                if let Some(b) = old.runs.get(&key) {
                    dirty.insert(b.row.group.clone());
                }
                state.runs.insert(
                    key,
                    Built {
                        fingerprint: fp,
                        row,
                    },
                );
            }
            Err(e) => {
                summary.failed += 1;
                eprintln!("tokentrace: {location}: not published: {e:#}");
            }
        }
    }
    // Runs of the last build that are gone (or failed now): their files go too.
    for (key, b) in &old.runs {
        if state.runs.contains_key(key) {
            continue;
        }
        summary.removed += 1;
        dirty.insert(b.row.group.clone());
        for ext in ["html", "json"] {
            let _ = std::fs::remove_file(run_file(&args.out, &b.row.slug, ext));
        }
    }
    let rows: Vec<&RunRow> = state.runs.values().map(|b| &b.row).collect();
    let groups: BTreeSet<&Group> = rows.iter().map(|r| &r.group).collect();
    summary.runs = rows.len();
    summary.groups = groups.len();
    for g in &groups {
        if !dirty.contains(*g) && group_file(&args.out, &g.slug).is_file() {
            continue;
        }
        let members: Vec<&RunRow> = rows.iter().copied().filter(|r| &r.group == *g).collect();
        render_group(&args.out, g, &members, &banner)?;
        summary.groups_rendered += 1;
    }
    for g in &dirty {
        if !groups.contains(g) {
            let _ = std::fs::remove_file(group_file(&args.out, &g.slug));
        }
    }
    let index = args.out.join("index.html");
    if summary.rendered > 0 || summary.removed > 0 || !index.is_file() {
        write(&index, &site::index_page(&args.title, &rows, &banner))?;
        summary.index_written = true;
    }
    let mut text =
        serde_json::to_string_pretty(&state).context("cannot encode the site's state")?;
    text.push('\n');
    // Unchanged, it stays untouched: a build that found nothing new writes nothing.
    if std::fs::read(&state_path).ok().as_deref() != Some(text.as_bytes()) {
        write(&state_path, &text)?;
    }
    Ok(summary)
}
