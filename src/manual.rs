//! What is generated from the command line's definition for a package: shell completions and
//! man pages (section 1), so they can never disagree with `--help`.
use std::{fs, path::Path};

use anyhow::{Context, Result};

/// The completion script for `shell`, as the shell's completion system loads it. Hidden
/// commands (lab helpers, `man-pages`) are left out: clap_complete would offer them. Made in
/// memory: clap_complete panics on a failed write (a closed pipe), so the caller writes it.
pub fn completions(shell: clap_complete::Shell, cli: clap::Command) -> String {
    let visible = cli.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
    let mut offered = clap::Command::new(cli.get_name().to_string())
        .version(cli.get_version().unwrap_or_default().to_string())
        .subcommands(visible.collect::<Vec<_>>());
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut offered, "ppscope", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// `ppscope.1` and `ppscope-COMMAND.1` for every command `--help` lists, into `dir`.
/// Returns nothing but errors: which file could not be written.
pub fn man_pages(cli: clap::Command, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // No `help` command on the pages: the main page would list a ppscope-help(1) that
    // nobody needs (`ppscope help` is `--help`).
    let mut cli = cli.disable_help_subcommand(true);
    // Sets every subcommand's `bin_name` ("ppscope top"), which their pages' synopses show.
    cli.build();
    let version = cli.get_version().unwrap_or_default().to_string();
    write_page(&cli, "ppscope", dir)?;
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        // The main page's SUBCOMMANDS section refers to each as ppscope-NAME(1); the title
        // line names the version, as the main page's does.
        let name = format!("ppscope-{}", sub.get_name());
        let page = sub.clone().name(name.clone()).version(version.clone());
        write_page(&page, &name, dir)?;
    }
    Ok(())
}

fn write_page(cmd: &clap::Command, name: &str, dir: &Path) -> Result<()> {
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .with_context(|| format!("cannot render {name}(1)"))?;
    fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))
}
