//! TRT-LLM logs: named (detect.rs) and read with the rules every engine shares; here, the
//! traceback frames of its PyTorch executor that place a failure in a phase.

use super::rules::FramePhase;

/// By file and function (deepest mapped frame wins; a trailing `*` matches by the start).
pub static FRAMES: &[(&str, &str, FramePhase)] = &[
    ("/tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py", "capture*", FramePhase::Graph),
    ("/tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py", "_setup_spec_decoding_and_forward", FramePhase::Graph),
    ("/tensorrt_llm/_torch/pyexecutor/model_engine.py", "_capture_generation_cuda_graphs", FramePhase::Graph),
];
