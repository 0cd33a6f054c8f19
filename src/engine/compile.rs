//! The launch's `kernel-compile` phase: the backend compiles and loads its kernels
//! (`Backend::kernel_compile`), and this turns what it reports into events: Started, one
//! Progress per module, a Log line with the cache hits and the time, then Done; or the
//! compiler's log, a `kernel-compile-error` finding and Failed; or Skipped when there is
//! nothing to compile.

use crate::backend::kernels::{CompileError, CompileProgress, KernelCompileError, KernelsReady};
use crate::backend::Backend;
use crate::event::{Event, EventSink, LogLevel, PhaseState, ProgressUnit};
use crate::finding::{Evidence, Finding, Severity, Side};
use crate::phase::PhaseId;

/// The finding id for a kernel that does not compile.
pub const KERNEL_COMPILE_ERROR: &str = "kernel-compile-error";

/// Run the phase on `backend`.
pub fn kernel_compile_phase<B: Backend + ?Sized>(backend: &B, events: &EventSink) -> Result<(), Finding> {
    let phase = PhaseId::KernelCompile;
    let progress = |p: CompileProgress<'_>| match p {
        CompileProgress::Started => events.phase(phase, PhaseState::Started),
        CompileProgress::Module { file, done, total } => {
            events.emit(Event::Progress { phase, unit: ProgressUnit::Items, gpu: None, label: file.to_string(), done, total })
        }
    };
    match backend.kernel_compile(&progress) {
        Ok(KernelsReady::Skipped(detail)) => {
            events.emit(Event::Phase { phase, state: PhaseState::Skipped, detail: Some(detail) });
            Ok(())
        }
        Ok(KernelsReady::Compiled(summary)) => {
            let detail = summary.to_string();
            events.log(LogLevel::Info, "cuda", detail.clone());
            events.emit(Event::Phase { phase, state: PhaseState::Done, detail: Some(detail) });
            Ok(())
        }
        Err(e) => {
            if let KernelCompileError::Source { error: CompileError::Source { log, .. }, .. } = &e {
                events.log(LogLevel::Error, "nvrtc", log.clone());
            }
            let finding = compile_finding(&e);
            events.emit(Event::Finding(finding.clone()));
            // The compiler that would not start failed before the phase did.
            let detail = (!matches!(e, KernelCompileError::Compiler(_))).then(|| e.to_string());
            events.emit(Event::Phase { phase, state: PhaseState::Failed, detail });
            Err(finding)
        }
    }
}

/// The `kernel-compile-error` finding: the kernel file and line when the compiler placed
/// the error, and the architecture compiled for.
pub fn compile_finding(e: &KernelCompileError) -> Finding {
    let f = Finding::new(KERNEL_COMPILE_ERROR, Severity::Error, PhaseId::KernelCompile, e.to_string());
    let arch = |f: Finding, arch: &str| f.with_evidence(Evidence::new(Side::Launch, "nvrtc", "--gpu-architecture", arch.to_string()));
    match e {
        KernelCompileError::Compiler(_) => f,
        KernelCompileError::Source { error, arch: target } => {
            let (file, key, value) = match error {
                CompileError::Source { file, line, message, .. } => (file.clone(), format!("line {line}"), message.clone()),
                CompileError::Nvrtc { file, message } => (file.clone(), "nvrtc".to_string(), message.clone()),
            };
            arch(f.with_evidence(Evidence::new(Side::Launch, file, key, value)), target)
        }
        KernelCompileError::Load { arch: target, .. } => arch(f, target),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    #[test]
    fn a_placed_compile_error_names_the_file_and_line() {
        let log = "kernels/rope.cu(17): error: identifier \"half2x\" is undefined\n";
        let error = CompileError::Source {
            file: "kernels/rope.cu".into(),
            line: 17,
            message: "identifier \"half2x\" is undefined".into(),
            log: log.into(),
        };
        let f = compile_finding(&KernelCompileError::Source { error, arch: "sm_90".into() });
        assert_eq!(f.id, KERNEL_COMPILE_ERROR);
        assert_eq!(f.message, "kernels/rope.cu:17: identifier \"half2x\" is undefined");
        assert_eq!((f.evidence[0].file.as_str(), f.evidence[0].key.as_str()), ("kernels/rope.cu", "line 17"));
        assert_eq!((f.evidence[1].key.as_str(), f.evidence[1].value.as_str()), ("--gpu-architecture", Some("sm_90")));
    }

    #[test]
    fn kernels_that_do_not_load_fail_the_phase_with_the_message() {
        let f = compile_finding(&KernelCompileError::Load { message: "GPU 0: loading kernels/rope.cu: x".into(), arch: "sm_90".into() });
        assert_eq!(f.message, "the compiled kernels did not load: GPU 0: loading kernels/rope.cu: x");
        assert_eq!(f.evidence.len(), 1);
        assert!(compile_finding(&KernelCompileError::Compiler("nvrtcVersion failed".into())).evidence.is_empty());
    }

    #[test]
    fn the_cpu_backend_skips_the_phase_and_says_why() {
        let (sink, mut rx) = EventSink::channel();
        kernel_compile_phase(&CpuBackend, &sink).unwrap();
        let Event::Phase { phase, state, detail } = rx.try_recv().unwrap().event else { panic!("expected a phase event") };
        assert_eq!(
            (phase, state, detail.as_deref()),
            (PhaseId::KernelCompile, PhaseState::Skipped, Some("the cpu backend compiles no kernels"))
        );
        assert!(rx.try_recv().is_err());
    }
}
