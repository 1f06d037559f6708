//! Attaching one hook: its backends tried in order (fentry/fexit, kprobes, tracepoints, or
//! the one `--backend` forces), each failure kept as a reason.
use std::{borrow::Cow, path::Path, time::Instant};

use anyhow::{anyhow, Context, Result};
use aya::{
    programs::{BtfTracePoint, FEntry, FExit, KProbe, Program, RawTracePoint},
    Btf, Ebpf,
};

use super::{
    hooks::{all_programs, FentryDef, HookDef, KprobeDef, TracepointDef},
    BackendChoice,
};
use crate::{
    host::{
        btf::KernelBtf,
        system::{self, Symbols},
    },
    snapshot::{Backend, HookLoad, HookStatus, MODULE_NOT_LOADED},
};

/// What the attach steps read from the kernel (kallsyms, BTF), read once per attach round.
pub(super) struct AttachContext {
    pub(super) symbols: Symbols,
    pub(super) btf: KernelBtf,
    /// aya's view of vmlinux BTF for fentry/fexit, None when it cannot be parsed.
    pub(super) aya_btf: Option<Btf>,
}

/// The programs a hook may attach, by name: the whole object (a module's hooks attached
/// again), or one hook's share of it (start-up attaches hooks on several threads at once, each
/// with the programs of its hook: `HookPrograms`).
pub(super) trait Programs {
    fn program_mut(&mut self, name: &str) -> Option<&mut Program>;
}

impl Programs for Ebpf {
    fn program_mut(&mut self, name: &str) -> Option<&mut Program> {
        Ebpf::program_mut(self, name)
    }
}

/// One hook's programs, taken out of the object (`Ebpf::programs_mut`).
pub(super) struct HookPrograms<'a>(pub(super) Vec<(&'a str, &'a mut Program)>);

impl Programs for HookPrograms<'_> {
    fn program_mut(&mut self, name: &str) -> Option<&mut Program> {
        self.0
            .iter_mut()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| &mut **p)
    }
}

pub(super) fn load_error(e: &aya::EbpfError) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.contains("Function not implemented") {
        anyhow!("this kernel has no BPF system call (CONFIG_BPF_SYSCALL is off): {text}")
    } else if text.contains("Operation not permitted") || text.contains("Permission denied") {
        anyhow!("the kernel refused to load ppscope's programs (missing CAP_BPF/CAP_PERFMON, or a lockdown/LSM policy): {text}")
    } else {
        anyhow!("cannot load ppscope's eBPF programs: {text}")
    }
}

/// Attaches a hook (see [`attach_first_backend`]) and says what that took (`HookLoad`).
pub(super) fn attach_hook(
    ebpf: &mut impl Programs,
    def: &HookDef,
    choice: BackendChoice,
    ctx: &AttachContext,
) -> HookStatus {
    let started = Instant::now();
    let mut status = attach_first_backend(ebpf, def, choice, ctx);
    if !status.module_absent() {
        let verified_insns = if status.attached() {
            verified_insns(ebpf, def)
        } else {
            None
        };
        status.load = Some(HookLoad {
            ms: started.elapsed().as_secs_f64() * 1e3,
            verified_insns,
        });
    }
    status
}

/// The instructions the verifier walked for a hook's loaded programs, summed (None where the
/// kernel does not say: before 5.16).
fn verified_insns(ebpf: &mut impl Programs, def: &HookDef) -> Option<u64> {
    let counts: Vec<u64> = all_programs(def)
        .into_iter()
        .filter_map(|name| {
            let info = ebpf.program_mut(name)?.info().ok()?;
            info.verified_instruction_count().map(u64::from)
        })
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// The hook's backends in order (or the one `--backend` forces) until one attaches, each
/// failure kept as a reason.
fn attach_first_backend(
    ebpf: &mut impl Programs,
    def: &HookDef,
    choice: BackendChoice,
    ctx: &AttachContext,
) -> HookStatus {
    let mut status = HookStatus {
        hook: Cow::Borrowed(def.name),
        group: def.group,
        backend: None,
        targets: Vec::new(),
        reasons: Vec::new(),
        loses: Cow::Borrowed(def.loses),
        load: None,
        missed: None,
    };
    if let Some(module) = def.module {
        let present = def
            .kprobe
            .as_ref()
            .is_some_and(|k| k.symbols.iter().any(|s| ctx.symbols.contains(s)));
        if !present && !Path::new(&format!("/sys/module/{module}")).exists() {
            status
                .reasons
                .push(format!("{module}: {MODULE_NOT_LOADED}"));
            return status;
        }
    }
    // `backends` offers only what the hook has programs for (the `continue`s cannot happen):
    // the agent's `ProbeConfig::feed_recycles` goes by it too.
    for backend in def.backends(choice) {
        let result = match backend {
            Backend::Fentry => match (&def.fentry, &def.kprobe) {
                (Some(f), Some(k)) => attach_fentry(ebpf, f, k, ctx),
                _ => continue,
            },
            Backend::Kprobe => match &def.kprobe {
                Some(k) => attach_kprobe(ebpf, k, ctx),
                None => continue,
            },
            Backend::Tracepoint => match &def.tracepoint {
                Some(t) => attach_tracepoint(ebpf, t, ctx),
                None => continue,
            },
        };
        match result {
            Ok(targets) => {
                status.backend = Some(backend);
                status.targets = targets;
                return status;
            }
            Err(reason) => status.reasons.push(reason),
        }
    }
    if status.reasons.is_empty() {
        let offered: Vec<&str> = [
            (def.fentry.is_some(), "fentry"),
            (def.kprobe.is_some(), "kprobe"),
            (def.tracepoint.is_some(), "tracepoint"),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
        .collect();
        status.reasons.push(format!(
            "--backend {} cannot serve this hook (it has: {})",
            format!("{choice:?}").to_lowercase(),
            offered.join(", ")
        ));
    }
    status
}

/// The symbols of a kprobe definition present on this kernel (first one only unless `all`).
fn present_symbols(def: &KprobeDef, symbols: &Symbols) -> Result<Vec<&'static str>, String> {
    let found: Vec<&'static str> = def
        .symbols
        .iter()
        .copied()
        .filter(|s| symbols.contains(s))
        .collect();
    if found.is_empty() {
        return Err(format!(
            "none of {} is in /proc/kallsyms (absent or inlined on this kernel)",
            def.symbols.join(", ")
        ));
    }
    Ok(if def.all { found } else { found[..1].to_vec() })
}

/// Wrappers that carry their own copy of the function (see `KprobeDef::wrappers`), and a
/// note for each that could not be judged.
fn thick_wrappers(def: &KprobeDef, symbols: &Symbols) -> (Vec<&'static str>, Vec<String>) {
    let mut thick = Vec::new();
    let mut notes = Vec::new();
    for wrapper in def.wrappers.iter().copied().filter(|w| symbols.contains(w)) {
        match symbols.size(wrapper) {
            Some(size) if size > THIN_WRAPPER_MAX_BYTES => thick.push(wrapper),
            Some(_) => {}
            None => notes.push(format!(
                "(not {wrapper}: its size is hidden from this process, so calls through it may be missed)"
            )),
        }
    }
    (thick, notes)
}

/// Above this size a "wrapper" holds its own copy of the function rather than a call to it
/// (a thin wrapper is the ftrace/IBT preamble plus a jump or call: well under 64 bytes).
const THIN_WRAPPER_MAX_BYTES: u64 = 64;

fn arity_entry(
    by_arity: Option<(usize, &'static str)>,
    default: &'static str,
    symbol: &str,
    btf: &KernelBtf,
) -> &'static str {
    match by_arity {
        Some((arity, prog)) if btf.func_param_count(symbol) == Some(arity) => prog,
        _ => default,
    }
}

fn attach_kprobe(
    ebpf: &mut impl Programs,
    def: &KprobeDef,
    ctx: &AttachContext,
) -> Result<Vec<String>, String> {
    if !system::has_kprobe_pmu() {
        return Err("kprobe: the kernel has no kprobes (CONFIG_KPROBES is off)".into());
    }
    let wanted = present_symbols(def, &ctx.symbols).map_err(|e| format!("kprobe: {e}"))?;
    // The first symbol found sets the signature (alternatives are versions of one function).
    let entry = arity_entry(def.entry_by_arity, def.entry, wanted[0], &ctx.btf);
    let (thick, notes) = thick_wrappers(def, &ctx.symbols);
    let mut attached = Vec::new();
    let progs: Vec<&str> = std::iter::once(entry).chain(def.exit).collect();
    for symbol in wanted.iter().chain(thick.iter()) {
        for prog in &progs {
            if let Err(e) = attach_one_kprobe(ebpf, prog, symbol) {
                unload_all(ebpf, &progs);
                return Err(format!("kprobe {symbol}: {e}"));
            }
        }
        attached.push(symbol.to_string());
    }
    attached.extend(notes);
    Ok(attached)
}

/// Unloads programs (detaching all their links) after a hook failed half way.
pub(super) fn unload_all(ebpf: &mut impl Programs, progs: &[&str]) {
    for name in progs {
        let _ = match ebpf.program_mut(name) {
            Some(Program::KProbe(p)) => p.unload(),
            Some(Program::FEntry(p)) => p.unload(),
            Some(Program::FExit(p)) => p.unload(),
            Some(Program::BtfTracePoint(p)) => p.unload(),
            Some(Program::RawTracePoint(p)) => p.unload(),
            _ => Ok(()),
        };
    }
}

fn attach_one_kprobe(ebpf: &mut impl Programs, prog: &str, symbol: &str) -> Result<()> {
    let program: &mut KProbe = ebpf
        .program_mut(prog)
        .with_context(|| format!("program {prog} missing from the object"))?
        .try_into()?;
    if program.fd().is_err() {
        program.load().map_err(|e| anyhow!("{e:#}"))?;
    }
    program.attach(symbol, 0).map_err(kprobe_attach_error)?;
    Ok(())
}

/// A refused kprobe in words: aya's error with the OS's reason under it ("`perf_event_open`
/// failed: Permission denied (os error 13)"), and where the kernel's `perf_event_paranoid` is
/// what refused it, the setting that lets it through (`system::paranoid_refusal`).
fn kprobe_attach_error(e: aya::programs::ProgramError) -> anyhow::Error {
    let e = anyhow::Error::from(e);
    let refused = e
        .chain()
        .filter_map(|s| s.downcast_ref::<std::io::Error>())
        .any(|io| matches!(io.raw_os_error(), Some(libc::EACCES | libc::EPERM)));
    let paranoid = refused
        .then(|| system::paranoid_refusal(system::perf_event_paranoid(), system::effective_caps()))
        .flatten();
    match paranoid {
        Some(why) => anyhow!("{e:#}; {why}"),
        None => anyhow!("{e:#}"),
    }
}

fn fentry_error(e: anyhow::Error) -> String {
    let text = format!("{e:#}");
    if text.contains("Operation not permitted") || text.contains("os error 1)") {
        "the kernel refuses BPF tracing programs (EPERM: lockdown or a security policy)".into()
    } else {
        text
    }
}

fn attach_fentry(
    ebpf: &mut impl Programs,
    def: &FentryDef,
    kdef: &KprobeDef,
    ctx: &AttachContext,
) -> Result<Vec<String>, String> {
    let btf = ctx
        .aya_btf
        .as_ref()
        .ok_or("fentry: cannot parse /sys/kernel/btf/vmlinux")?;
    let wanted = present_symbols(kdef, &ctx.symbols).map_err(|e| format!("fentry: {e}"))?;
    let (thick, notes) = thick_wrappers(kdef, &ctx.symbols);
    let mut plan: Vec<(&str, Option<&str>, Option<&str>)> = Vec::new();
    for (i, symbol) in wanted.iter().enumerate() {
        let Some(&(entry, exit)) = def.pairs.get(i).filter(|p| p.0.is_some() || p.1.is_some())
        else {
            return Err(format!("fentry: no program for a further symbol {symbol}"));
        };
        let entry = entry.map(|e| arity_entry(def.entry_by_arity, e, symbol, &ctx.btf));
        plan.push((symbol, entry, exit));
    }
    for wrapper in &thick {
        match def.wrapper_entry {
            Some(entry) => plan.push((wrapper, Some(entry), None)),
            None => return Err(format!("fentry: no program for the wrapper {wrapper}")),
        }
    }
    let mut attached = Vec::new();
    let mut loaded: Vec<&str> = Vec::new();
    for (symbol, entry, exit) in plan {
        for (prog, is_exit) in [(entry, false), (exit, true)] {
            let Some(prog) = prog else { continue };
            loaded.push(prog);
            if let Err(e) = attach_one_fentry(ebpf, prog, symbol, btf, is_exit) {
                // Half a hook must not stay attached beside the next backend's whole one.
                unload_all(ebpf, &loaded);
                let kind = if is_exit { "fexit" } else { "fentry" };
                return Err(format!("{kind} {symbol}: {}", fentry_error(e)));
            }
        }
        attached.push(symbol.to_string());
    }
    attached.extend(notes);
    Ok(attached)
}

fn attach_one_fentry(
    ebpf: &mut impl Programs,
    prog: &str,
    symbol: &str,
    btf: &Btf,
    exit: bool,
) -> Result<()> {
    let program = ebpf
        .program_mut(prog)
        .with_context(|| format!("program {prog} missing from the object"))?;
    if exit {
        let p: &mut FExit = program.try_into()?;
        p.load(symbol, btf).map_err(|e| anyhow!("{e:#}"))?;
        p.attach().map_err(|e| anyhow!("{e:#}"))?;
    } else {
        let p: &mut FEntry = program.try_into()?;
        p.load(symbol, btf).map_err(|e| anyhow!("{e:#}"))?;
        p.attach().map_err(|e| anyhow!("{e:#}"))?;
    }
    Ok(())
}

fn attach_tracepoint(
    ebpf: &mut impl Programs,
    def: &TracepointDef,
    ctx: &AttachContext,
) -> Result<Vec<String>, String> {
    let target = format!("tracepoint:{}:{}", def.category, def.name);
    let mut typed_refused = None;
    if let (Some(prog), Some(btf)) = (def.typed_prog, &ctx.aya_btf) {
        // Refused where the kernel refuses tracing programs (lockdown, an LSM) or its BTF
        // lacks the tracepoint: the raw program below gives the same figures, with a helper
        // call per field. (The development host refuses fentry but takes `tp_btf`.)
        let mut typed = || -> Result<()> {
            let program: &mut BtfTracePoint = ebpf
                .program_mut(prog)
                .with_context(|| format!("program {prog} missing from the object"))?
                .try_into()?;
            if program.fd().is_err() {
                program.load(def.name, btf)?;
            }
            program.attach()?;
            Ok(())
        };
        match typed() {
            Ok(()) => return Ok(vec![format!("{target} (tp_btf)")]),
            Err(e) => {
                // Loaded but not attached: not left in the kernel beside the raw one.
                unload_all(ebpf, &[prog]);
                let why = format!("{e:#}");
                let why: String = why.lines().next().unwrap_or("").chars().take(120).collect();
                typed_refused = Some(format!("tp_btf refused ({why}): raw tracepoint"));
            }
        }
    }
    let mut run = || -> Result<()> {
        let program: &mut RawTracePoint = ebpf
            .program_mut(def.prog)
            .with_context(|| format!("program {} missing from the object", def.prog))?
            .try_into()?;
        if program.fd().is_err() {
            program.load().map_err(|e| anyhow!("{e:#}"))?;
        }
        program.attach(def.name).map_err(|e| anyhow!("{e:#}"))?;
        Ok(())
    };
    run().map_err(|e| format!("tracepoint {}: {e}", def.name))?;
    Ok(std::iter::once(target).chain(typed_refused).collect())
}
