//! `tokentrace site`: a fleet of runs (folders or object-store prefixes) as a static
//! website of plain files: an index, a page per run, a page per model × hardware group;
//! incremental: an unchanged run is neither scored nor written again.

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
    /// Everything that changes every run's page when it changes: tokentrace's version,
    /// the rule set's contents, `--public`.
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
/// The site's own folder, when inside the run, is left out.
fn local_fingerprint(dir: &Path, site: &Path) -> anyhow::Result<String> {
    fn walk(root: &Path, dir: &Path, site: &Path, out: &mut Vec<u8>) -> anyhow::Result<()> {
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("cannot read {}", dir.display()))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        // A cell's commit mark: hashed below as a JSON file, and telling whether it
        // records its files' SHA-256.
        let mark = std::fs::read(dir.join(tokentrace_schemas::layout::CELL_FILE)).ok();
        let checksummed = mark
            .as_deref()
            .is_some_and(|m| m.windows(8).any(|w| w == b"\"sha256\""));
        for e in entries {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            // Rescore's results and the site's own files do not change the trace.
            if name.starts_with('.')
                || (dir == root && name == tokentrace_schemas::layout::RESULTS_DIR)
                || std::fs::canonicalize(&path).is_ok_and(|p| p == site)
            {
                continue;
            }
            // Through a link to what it names: a change behind it is a change.
            let meta = std::fs::metadata(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
            if meta.is_dir() {
                walk(root, &path, site, out)?;
            } else if name.ends_with(".json") {
                let digest = match (&mark, name == tokentrace_schemas::layout::CELL_FILE) {
                    (Some(m), true) => sha(m),
                    _ => sha(&std::fs::read(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?),
                };
                let _ = writeln!(out, "{rel} {digest}");
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
    walk(dir, dir, site, &mut material)?;
    Ok(sha(&material))
}

/// The fingerprint of a run at `location`: a folder's files, or a stored run's object
/// listing (keys, sizes, ETags), read without downloading.
fn fingerprint(location: &str, site: &Path) -> anyhow::Result<String> {
    if !is_url(location) {
        return local_fingerprint(Path::new(location), site);
    }
    let store = RunStore::open(location)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let listing = rt
        .block_on(store.listing())
        .with_context(|| format!("cannot list {location}"))?;
    // As for a folder: rescore's results do not change the trace.
    let listing: Vec<String> = listing
        .into_iter()
        .filter(|line| !line.contains("/results/"))
        .collect();
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
    let (scoring, mut traces) =
        crate::analyze::scored_with_traces(local.dir(), rules, Verify::Checksums)?;
    let (scoring, dropped) = if args.public {
        let (s, mut d) = tokentrace_analyzer::public::scrub(&scoring)
            .with_context(|| format!("cannot make {location} public"))?;
        // The drill-downs' loop text, as the scoring's copy of it.
        for (key, trace) in &mut traces {
            if let Some((before, cycle, after)) = &mut trace.loop_text {
                let place = format!("cell {key} loop text");
                for part in [before, cycle, after] {
                    *part = tokentrace_analyzer::public::scrub_at(part, &place, &mut d);
                }
            }
        }
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

/// Removes the files of `dir` ending in one of `exts` whose stem is not in `keep`.
fn sweep(dir: &Path, exts: &[&str], keep: &BTreeSet<&str>) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for e in entries.flatten() {
        let path = e.path();
        let ours = path
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| exts.contains(&x));
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if ours && !keep.contains(stem) {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(())
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

/// The last build's state at `path`, when it was built the same way (`build`); else an
/// empty one (every run is rendered).
fn read_state(path: &Path, build: &str) -> State {
    match std::fs::read(path) {
        Err(_) => State::default(),
        Ok(bytes) => match serde_json::from_slice::<State>(&bytes) {
            Ok(s) if s.build == build => s,
            Ok(_) => State::default(),
            Err(e) => {
                eprintln!(
                    "tokentrace: {}: not read ({e}); every run is rendered again",
                    path.display()
                );
                State::default()
            }
        },
    }
}

/// One build under way: its settings, what the last build left, what this one has.
struct Builder<'a> {
    args: &'a SiteArgs,
    rules: RuleSet,
    banner: Banner,
    /// The site's folder, absolute (left out of a run's fingerprint when inside it).
    site_dir: PathBuf,
    old: State,
    state: State,
    /// Groups whose page is written again: a run of theirs came, went or changed.
    dirty: BTreeSet<Group>,
    summary: Summary,
}

impl Builder<'_> {
    /// Publishes the run at `location`: left as it is when unchanged, else scored and
    /// written; one that fails keeps its last page.
    fn publish(&mut self, location: &str) {
        // A folder by its absolute path: the same run keeps its page's address however
        // the folder is named on the command line.
        let canonical = if is_url(location) {
            location.to_string()
        } else {
            std::fs::canonicalize(location)
                .map_or_else(|_| location.to_string(), |p| p.display().to_string())
        };
        let key = sha(canonical.as_bytes());
        if self.state.runs.contains_key(&key) {
            return;
        }
        let fp = match fingerprint(location, &self.site_dir) {
            Ok(fp) => fp,
            Err(e) => return self.failed(location, key, &e),
        };
        let out = &self.args.out;
        if let Some(b) = self.old.runs.get(&key)
            && b.fingerprint == fp
            && run_file(out, &b.row.slug, "html").is_file()
            && run_file(out, &b.row.slug, "json").is_file()
        {
            let row = b.row.clone();
            self.state.runs.insert(
                key,
                Built {
                    fingerprint: fp,
                    row,
                },
            );
            return;
        }
        let slug = format!("run-{}", &key[..16]);
        match render_run(location, &slug, &self.rules, self.args, &self.banner) {
            Ok((row, dropped)) => {
                for d in &dropped {
                    eprintln!("tokentrace: {location}: dropped {d}");
                }
                self.summary.rendered += 1;
                self.dirty.insert(row.group.clone());
                if let Some(b) = self.old.runs.get(&key) {
                    self.dirty.insert(b.row.group.clone());
                }
                self.state.runs.insert(
                    key,
                    Built {
                        fingerprint: fp,
                        row,
                    },
                );
            }
            Err(e) => self.failed(location, key, &e),
        }
    }

    /// A run that could not be read or scored this time: named, and its page of the
    /// last build kept, if it had one.
    fn failed(&mut self, location: &str, key: String, e: &anyhow::Error) {
        self.summary.failed += 1;
        eprintln!("tokentrace: {location}: not published: {e:#}");
        if let Some(b) = self.old.runs.get(&key) {
            eprintln!("tokentrace: {location}: its page of the last build stays");
            let kept = Built {
                fingerprint: b.fingerprint.clone(),
                row: b.row.clone(),
            };
            self.state.runs.insert(key, kept);
        }
    }

    /// The group pages, the sweep of pages no longer the site's, the index and the
    /// state, each written only when changed.
    fn finish(mut self) -> anyhow::Result<Summary> {
        let out = &self.args.out;
        // Runs of the last build that are gone: their groups change.
        for (key, b) in &self.old.runs {
            if !self.state.runs.contains_key(key) {
                self.summary.removed += 1;
                self.dirty.insert(b.row.group.clone());
            }
        }
        let rows: Vec<&RunRow> = self.state.runs.values().map(|b| &b.row).collect();
        let groups: BTreeSet<&Group> = rows.iter().map(|r| &r.group).collect();
        self.summary.runs = rows.len();
        self.summary.groups = groups.len();
        for g in &groups {
            if !self.dirty.contains(*g) && group_file(out, &g.slug).is_file() {
                continue;
            }
            let members: Vec<&RunRow> = rows.iter().copied().filter(|r| &r.group == *g).collect();
            render_group(out, g, &members, &self.banner)?;
            self.summary.groups_rendered += 1;
        }
        // Every page no run or group of this build has goes: a run gone, a group emptied,
        // and whatever an earlier build under other settings (another rule set, not
        // --public) left, which must not be published beside this one's.
        let slugs: BTreeSet<&str> = rows.iter().map(|r| r.slug.as_str()).collect();
        let group_slugs: BTreeSet<&str> = groups.iter().map(|g| g.slug.as_str()).collect();
        sweep(&out.join("runs"), &["html", "json"], &slugs)?;
        sweep(&out.join("groups"), &["html"], &group_slugs)?;
        // The index only when it changed (a run came, went or changed, or the title).
        let index = out.join("index.html");
        let text = site::index_page(&self.args.title, &rows, &self.banner);
        if std::fs::read(&index).ok().as_deref() != Some(text.as_bytes()) {
            write(&index, &text)?;
            self.summary.index_written = true;
        }
        let mut text =
            serde_json::to_string_pretty(&self.state).context("cannot encode the site's state")?;
        text.push('\n');
        // Unchanged, it stays untouched: a build that found nothing new writes nothing.
        let state_path = out.join(STATE_FILE);
        if std::fs::read(&state_path).ok().as_deref() != Some(text.as_bytes()) {
            write(&state_path, &text)?;
        }
        Ok(self.summary)
    }
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
        "{}\n{}\n{}",
        tokentrace_schemas::build::CLI_VERSION,
        serde_json::to_string(&rules).context("cannot encode the rule set")?,
        args.public,
    )
    .as_bytes());
    if is_url(&args.out.display().to_string()) {
        anyhow::bail!(
            "{}: a site is written to a folder; copy the folder to the bucket afterwards",
            args.out.display()
        );
    }
    for dir in ["runs", "groups"] {
        let d = args.out.join(dir);
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let locations = crate::catalog::find(&args.sources)?;
    if locations.is_empty() {
        anyhow::bail!("no run found under {}", args.sources.join(", "));
    }
    let mut builder = Builder {
        args,
        rules,
        banner,
        site_dir: std::fs::canonicalize(&args.out)
            .with_context(|| format!("cannot open {}", args.out.display()))?,
        old: read_state(&args.out.join(STATE_FILE), &build_key),
        state: State {
            build: build_key,
            runs: BTreeMap::new(),
        },
        dirty: BTreeSet::new(),
        summary: Summary::default(),
    };
    for location in &locations {
        builder.publish(location);
    }
    builder.finish()
}
