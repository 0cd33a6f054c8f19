#!/usr/bin/env python3
"""Build testdata/logs/: SGLang and vLLM logs for `specdeck replay`'s tests.

Every marker and error message is rendered with the exact format string that
docs/research/failure_catalogue.md quotes from the engine source (SGLang §1.2-1.4 in the
classic ≤0.5.2, mid 0.5.9 and new 0.5.23 wordings; vLLM §2 in 0.10.x and 0.33 wordings), using
Python's own f-string / %-formatting, so the bytes are what those engines print. Surrounding
text the catalogue does not quote (traceback frames, tqdm bar bodies, uvicorn lines) follows
the shape of real logs.

For each failure mode and wording there are two logs: a single-rank one and a 4-rank one whose
records interleave the ranks (seeded, so the files are stable). cases.json says what replay
must report for each: every finding (id, severity, phase, remedies with their changes), the
outcome, and the version guess. The Rust tests add the prefixed variants (docker compose, Ray,
Kubernetes stamps, ANSI colours, CRLF) on the fly.

Run from the repository root:  python3 scripts/build_replay_logs.py
"""

import datetime
import json
import os
import random
import shutil

ROOT = "testdata/logs"
SITE = "/usr/local/lib/python3.10/dist-packages"
TARGET = "/models/Meta-Llama-3.1-8B-Instruct"
DRAFT = "/models/sglang-EAGLE3-LLaMA3.1-Instruct-8B"
DIALECT_DIRS = {"C": "sglang-classic", "M": "sglang-mid", "N": "sglang-new", "V10": "vllm-0.10", "V33": "vllm-0.33"}
GUESS = {
    "C": "sglang 0.4.10–0.5.2 wording",
    "M": "sglang 0.5.9 wording",
    "N": "sglang 0.5.23 wording",
    "V10": "vllm 0.10.2",
    "V33": "vllm 0.33.0",
}
CAPTURE_BS = [1, 2, 4, 8]


def tqdm_frames(desc_for, total, custom=False):
    """One physical line of tqdm redraws, as tqdm writes them (\\r before each state)."""
    out = []
    for done in range(total + 1):
        pct = done * 100 // total
        if custom:  # SGLang/vLLM weight loading: bar_format with "% Completed |"
            rest = " [00:0{}<00:0{}, 1.02s/it]".format(done, total - done) if done else " [00:00<?, ?it/s]"
            out.append(f"\r{desc_for(done)}: {pct:3d}% Completed | {done}/{total}{rest}")
        else:
            filled = done * 10 // total
            bar = "█" * filled + " " * (10 - filled)
            rest = " [00:0{}<00:0{},  2.51it/s]".format(done, total - done) if done else " [00:00<?, ?it/s]"
            out.append(f"\r{desc_for(done)}: {pct:3d}%|{bar}| {done}/{total}{rest}")
    return "".join(out)


class Frames:
    """Traceback frames: (path under site-packages, line, function, source line)."""

    @staticmethod
    def render(frames):
        lines = []
        for path, lineno, func, code in frames:
            full = path if path.startswith("<") else f"{SITE}/{path}"
            lines.append(f'  File "{full}", line {lineno}, in {func}')
            if code:
                lines.append(f"    {code}")
        return lines


# ---------------------------------------------------------------------------------------------
# SGLang


class Sglang:
    def __init__(self, dialect, tp, seed, **args):
        self.d = dialect
        self.tp = tp
        self.rng = random.Random(seed)
        self.t = datetime.datetime(2026, 3, 2, 10, 0, 0)
        self.lines = []
        self.args = {
            "model_path": TARGET,
            "tp_size": tp,
            "context_length": None,
            "mem_fraction_static": 0.85,
            "cuda_graph_max_bs": 8,
            "page_size": 1,
            "speculative_algorithm": "EAGLE3",
            "speculative_draft_model_path": DRAFT,
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
        }
        self.args.update(args)
        self.avail = 78.50
        self.draft_cls = None

    # -- writing
    def tick(self, s=1):
        self.t += datetime.timedelta(seconds=s)

    def stamp(self):
        return self.t.strftime("%Y-%m-%d %H:%M:%S")

    def main(self, msg):
        self.lines.append(f"[{self.stamp()}] {msg}")

    def ranks(self, msg, rank0=False):
        order = [0] if rank0 else list(range(self.tp))
        self.rng.shuffle(order)
        for r in order:
            self.lines.append(f"[{self.stamp()} TP{r}] {msg}")

    def bare(self, text):
        self.lines.append(text)

    def mem(self, used):
        self.avail -= used
        return self.avail

    # -- start-up stages, each in the dialect's wording
    def args_dump(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        self.main(f"server_args=ServerArgs({fields})")
        warnings = {
            "C": ["Overlap scheduler is disabled because of using eagle speculative decoding."],
            "M": [
                "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.",
                "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on.",
            ],
            "N": [
                "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.",
                "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding.",
            ],
        }[self.d]
        for w in warnings:
            self.main(w)
        self.tick()

    def init(self):
        if self.d == "N":
            self.ranks("Init parallel begin.")
            self.tick(2)
            self.ranks(f"Init parallel ends. elapsed={2.13:.2f} s")
            self.ranks(f"Memory baseline taken. mem usage={0.31:.2f} GB")
        else:
            self.ranks("Init torch distributed begin.")
            self.tick(2)
            if self.d == "C":
                self.ranks(f"Init torch distributed ends. mem usage={0.31:.2f} GB")
            else:
                self.ranks(f"Init torch distributed ends. elapsed={2.13:.2f} s, mem usage={0.31:.2f} GB")

    def load_begin(self, draft=False):
        if draft and self.d != "N":  # C/M: the draft ModelRunner inits torch distributed again
            self.ranks("Init torch distributed begin.")
            self.ranks(
                f"Init torch distributed ends. mem usage={0.00:.2f} GB"
                if self.d == "C"
                else f"Init torch distributed ends. elapsed={0.01:.2f} s, mem usage={0.00:.2f} GB"
            )
        self.ranks(f"Load weight begin. avail mem={self.avail:.2f} GB")

    def load_end(self, draft=False, cls=None):
        shards = 1 if draft else 4
        self.bare(tqdm_frames(lambda _: "Loading safetensors checkpoint shards", shards, custom=True))
        self.tick(3 if draft else 40)
        cls = cls or ((self.draft_cls or "LlamaForCausalLMEagle3") if draft else "LlamaForCausalLM")
        usage = 0.80 if draft else 14.99
        avail = self.mem(usage)
        elapsed = 3.02 if draft else 40.18
        if self.d == "C":
            msg = f"Load weight end. type={cls}, dtype=torch.bfloat16, avail mem={avail:.2f} GB, mem usage={usage:.2f} GB."
        elif self.d == "M":
            msg = f"Load weight end. elapsed={elapsed:.2f} s, type={cls}, dtype=torch.bfloat16, avail mem={avail:.2f} GB, mem usage={usage:.2f} GB."
        else:
            quant_str = ""
            msg = f"Load weight end. elapsed={elapsed:.2f} s, type={cls}, {quant_str + ', ' if quant_str else ''}avail mem={avail:.2f} GB, mem usage={usage:.2f} GB."
        self.ranks(msg)

    def kv(self, draft=False):
        num_tokens = 411_880 if not draft else 411_960
        k_size_GB = v_size_GB = 25.14 if not draft else 0.79
        if self.d == "M" and not draft:
            self.ranks("Using KV cache dtype: torch.bfloat16", rank0=True)
        if self.d == "N":
            cache_name = "KV Cache"
            self.ranks(
                f"{cache_name} {'is allocated'}. dtype: torch.bfloat16, #tokens: {num_tokens}, K size: {k_size_GB:.2f} GB, V size: {v_size_GB:.2f} GB"
            )
        else:
            self.ranks(f"KV Cache is allocated. #tokens: {num_tokens}, K size: {k_size_GB:.2f} GB, V size: {v_size_GB:.2f} GB")
        self.ranks(f"Memory pool end. avail mem={self.mem(2 * k_size_GB):.2f} GB")
        self.tick()

    def capture_bar(self):
        avail = self.avail

        def desc(done):
            bs = CAPTURE_BS[::-1][min(done, len(CAPTURE_BS) - 1)]
            avail_mem = avail - 0.02 * done
            return f"Capturing batches ({bs=} {avail_mem=:.2f} GB)"

        self.bare(tqdm_frames(desc, len(CAPTURE_BS)))

    def target_capture_begin(self):
        before_mem = self.avail
        if self.d == "N":
            capture_name, decode_backend, num_tokens_per_req = "target verify", "full", 4
            self.ranks(
                f"Capture {capture_name} {'CUDA graph'} begin. backend={decode_backend}, num_tokens_per_req={num_tokens_per_req}, avail mem={before_mem:.2f} GB",
                rank0=True,
            )
        else:
            self.ranks(
                f"Capture {'cuda graph'} begin. This can take up to several minutes. avail mem={before_mem:.2f} GB", rank0=True
            )
            self.ranks(f"Capture cuda graph bs {CAPTURE_BS}", rank0=True)

    def target_capture_end(self):
        self.capture_bar()
        self.tick(12)
        after_mem = self.mem(0.54)
        if self.d == "N":
            self.ranks(
                f"Capture target verify CUDA graph end. bs={CAPTURE_BS}, elapsed={12.11:.2f} s, mem usage={0.54:.2f} GB, avail mem={after_mem:.2f} GB.",
                rank0=True,
            )
        else:
            self.ranks(
                f"Capture cuda graph end. Time elapsed: {12.11:.2f} s. mem usage={0.54:.2f} GB. avail mem={after_mem:.2f} GB.",
                rank0=True,
            )

    def draft_capture_begin(self):
        before_mem = self.avail
        if self.d == "N":
            self.ranks(
                f"Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req={1}, bs={CAPTURE_BS}, avail mem={before_mem:.2f} GB",
                rank0=True,
            )
        else:
            self.ranks(
                f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={before_mem:.2f} GB", rank0=True
            )

    def draft_capture_end(self):
        self.capture_bar()
        self.tick(20)
        before_mem, after_mem = self.avail, self.mem(0.21)
        if self.d == "N":
            self.ranks(
                f"Capture draft decode CUDA graph end. elapsed={20.40:.2f} s, mem usage={before_mem - after_mem:.2f} GB, avail mem={after_mem:.2f} GB.",
                rank0=True,
            )
            self.ranks(
                f"Capture draft extend CUDA graph begin. backend=full, num_tokens_per_req={4}, bs={CAPTURE_BS}, avail mem={after_mem:.2f} GB",
                rank0=True,
            )
            self.capture_bar()
            self.ranks(
                f"Capture draft extend CUDA graph end. elapsed={5.02:.2f} s, mem usage={0.05:.2f} GB, avail mem={after_mem - 0.05:.2f} GB.",
                rank0=True,
            )
        else:
            self.ranks(
                f"Capture draft cuda graph end. Time elapsed: {20.40:.2f} s. mem usage={(before_mem - after_mem):.2f} GB. avail mem={after_mem:.2f} GB.",
                rank0=True,
            )
            self.ranks(
                f"Capture draft extend cuda graph begin. This can take up to several minutes. avail mem={after_mem:.2f} GB",
                rank0=True,
            )
            self.capture_bar()
            self.ranks(
                f"Capture draft extend cuda graph end. Time elapsed: {5.02:.2f} s. mem usage={0.05:.2f} GB. avail mem={after_mem - 0.05:.2f} GB.",
                rank0=True,
            )
        self.tick()

    def serve(self):
        ctx = self.args["context_length"] or 131072
        self.ranks(
            f"max_total_num_tokens={411880}, chunked_prefill_size={8192}, max_prefill_tokens={16384}, max_running_requests={48}, context_len={ctx}, {'available_gpu_mem'}={self.avail:.2f} GB",
            rank0=True,
        )
        for line in [
            "INFO:     Started server process [4242]",
            "INFO:     Waiting for application startup.",
            "INFO:     Application startup complete.",
            "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        ]:
            self.bare(line)
        self.tick()

    def warmup(self):
        self.ranks(
            "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
            rank0=True,
        )

    def ready(self):
        self.bare('INFO:     127.0.0.1:50218 - "POST /generate HTTP/1.1" 200 OK')
        self.main("The server is fired up and ready to roll!")
        self.tick()

    def decode(self, batches, accept):
        for i in range(batches):
            spec_accept_length = accept + (0.02 if i % 2 else -0.02) * (accept > 1.05)
            token_msg = f"#token: {1200 + 40 * i}, token usage: {0.01:.2f}, "
            msg = f"Decode batch. #running-req: {4}, {token_msg}" + f"accept len: {spec_accept_length:.2f}, "
            if self.d == "N":
                msg += f"accept rate: {(spec_accept_length - 1) / 3:.2f}, "
            msg += f"{'cuda graph'}: {True}, gen throughput (token/s): {412.5 + i:.2f}, #queue-req: {0}, "
            self.ranks(msg, rank0=True)
            self.tick(2)

    # -- the order of the stages, up to a failure point
    def order(self):
        if self.d == "N":
            return [
                ("args", self.args_dump),
                ("init", self.init),
                ("target_load_begin", lambda: self.load_begin()),
                ("target_load", lambda: self.load_end()),
                ("draft_init", lambda: None),
                ("draft_load_begin", lambda: self.load_begin(draft=True)),
                ("draft_load", lambda: self.load_end(draft=True)),
                ("kv", lambda: (self.kv(), self.kv(draft=True))),
                ("attention", lambda: None),
                ("target_capture_begin", self.target_capture_begin),
                ("target_capture", self.target_capture_end),
                ("draft_capture_begin", self.draft_capture_begin),
                ("draft_capture", self.draft_capture_end),
                ("serve", self.serve),
                ("warmup", self.warmup),
                ("ready", self.ready),
            ]
        return [
            ("args", self.args_dump),
            ("init", self.init),
            ("target_load_begin", lambda: self.load_begin()),
            ("target_load", lambda: self.load_end()),
            ("kv", self.kv),
            ("target_capture_begin", self.target_capture_begin),
            ("target_capture", self.target_capture_end),
            ("attention", lambda: None),
            ("draft_init", lambda: None),
            ("draft_load_begin", lambda: self.load_begin(draft=True)),
            ("draft_load", lambda: self.load_end(draft=True)),
            ("draft_kv", lambda: self.kv(draft=True)),
            ("draft_capture_begin", self.draft_capture_begin),
            ("draft_capture", self.draft_capture_end),
            ("serve", self.serve),
            ("warmup", self.warmup),
            ("ready", self.ready),
        ]

    def run_until(self, point, overrides=None):
        """Emit every stage before `point` (a stage name; "end" for all)."""
        overrides = overrides or {}
        for name, stage in self.order():
            if name == point:
                return
            overrides.get(name, stage)()

    def run_from(self, point, overrides=None):
        overrides = overrides or {}
        started = False
        for name, stage in self.order():
            started = started or name == point
            if started:
                overrides.get(name, stage)()

    # -- crashes
    def scheduler_crash(self, frames, exc_lines, ranks=None):
        """`Scheduler hit an exception` with a traceback, as one record per rank."""
        ranks = list(range(self.tp)) if ranks is None else ranks
        self.rng.shuffle(ranks)
        self.tick()
        tb = Frames.render(frames) + exc_lines
        for r in ranks:
            self.lines.append(f"[{self.stamp()} TP{r}] Scheduler hit an exception: Traceback (most recent call last):")
            self.lines.extend(tb)
        self.main("Received sigquit from a child process. It usually means the child failed.")

    def main_crash(self, frames, exc_lines):
        """An uncaught exception in the launching process (argument resolution)."""
        self.bare("Traceback (most recent call last):")
        self.lines.extend(Frames.render(frames) + exc_lines)


def scheduler_to(d, call):
    """Frames from the scheduler process entry to the line that builds a worker (`call`)."""
    if d == "C":
        return [
            ("sglang/srt/managers/scheduler.py", 2476, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
            ("sglang/srt/managers/scheduler.py", 312, "__init__", call),
        ]
    return [
        ("sglang/srt/managers/scheduler.py", 3207, "run_scheduler_process", "scheduler = Scheduler("),
        ("sglang/srt/managers/scheduler.py", 367, "__init__", "self.init_model_worker()"),
        ("sglang/srt/managers/scheduler.py", 563, "init_model_worker", call),
    ]


def runner(d, draft=False):
    """From the scheduler into a ModelRunner's __init__ (the target's or the draft's)."""
    if draft:
        worker = "sglang/srt/speculative/eagle_worker_v2.py" if d == "N" else "sglang/srt/speculative/eagle_worker.py"
        frames = scheduler_to(d, "self.draft_worker = EagleDraftWorker(" if d == "N" else "self.draft_worker = EAGLEWorker(")
        frames.append((worker, 95, "__init__", "self.draft_runner = TpModelWorker(" if d == "N" else "super().__init__("))
    else:
        frames = scheduler_to(d, "self.tp_worker = TpModelWorker(")
    return frames + [
        ("sglang/srt/managers/tp_worker.py", 83, "__init__", "self.model_runner = ModelRunner("),
        ("sglang/srt/model_executor/model_runner.py", 240, "__init__", "self.initialize(min_per_gpu_memory)"),
    ]


def draft_worker(d):
    """Frames from the scheduler into the draft worker's __init__."""
    worker = "sglang/srt/speculative/eagle_worker_v2.py" if d == "N" else "sglang/srt/speculative/eagle_worker.py"
    return scheduler_to(d, "self.draft_worker = EagleDraftWorker(" if d == "N" else "self.draft_worker = EAGLEWorker(") + [
        (worker, 95, "__init__", None)
    ]


def stack(d, point):
    """Frames from the scheduler to the function each failure point runs in."""
    load = [
        ("sglang/srt/model_executor/model_runner.py", 312, "initialize", "self.load_model()"),
        ("sglang/srt/model_executor/model_runner.py", 701, "load_model", "self.model = get_model("),
        ("sglang/srt/model_loader/loader.py", 400, "load_model", "model.load_weights(self._get_all_weights(model_config, model))"),
    ]
    if point == "target_load":
        return runner(d) + load
    if point == "draft_load":
        return runner(d, draft=True) + load
    if point == "kv":
        return runner(d) + [
            ("sglang/srt/model_executor/model_runner.py", 330, "initialize", "self.init_memory_pool("),
            ("sglang/srt/model_executor/model_runner.py", 1320, "init_memory_pool", None),
        ]
    if point == "attention":
        if d == "N":
            return runner(d) + [
                ("sglang/srt/model_executor/model_runner.py", 356, "initialize", "self.init_all_attention_backends()"),
                ("sglang/srt/model_executor/model_runner_components/attention_backend_setup.py", 142, "configure_aux_hidden_state_capture", "raise ValueError("),
            ]
        return runner(d) + [
            ("sglang/srt/model_executor/model_runner.py", 358, "initialize", "self.model.set_eagle3_layers_to_capture("),
            ("torch/nn/modules/module.py", 1940, "__getattr__", "raise AttributeError("),
        ]
    if point == "draft_init":
        return runner(d, draft=True)[:-2] + [
            ("sglang/srt/managers/tp_worker.py", 70, "__init__", "self.model_config = ModelConfig.from_server_args("),
            ("sglang/srt/configs/model_config.py", 271, "from_server_args", "return ModelConfig("),
            ("sglang/srt/configs/model_config.py", 98, "__init__" if d == "C" else "_derive_context_length", "raise ValueError("),
        ]
    if point == "embed":
        if d == "N":
            return draft_worker(d)[:-1] + [
                ("sglang/srt/speculative/eagle_worker_v2.py", 240, "init_lm_head", "embed, head = resolve_target_embed_and_head(self.target_worker)"),
                ("sglang/srt/speculative/pp_draft_embedding.py", 31, "resolve_target_embed_and_head", "return target_model.get_embed_and_head()"),
            ]
        return draft_worker(d)[:-1] + [
            ("sglang/srt/speculative/eagle_worker.py", 130, "__init__", "embed, head = self.target_worker.model_runner.model.get_embed_and_head()"),
            ("torch/nn/modules/module.py", 1940, "__getattr__", "raise AttributeError("),
        ]
    if point == "draft_capture":
        worker = "sglang/srt/speculative/eagle_worker_v2.py" if d == "N" else "sglang/srt/speculative/eagle_worker.py"
        func = "_capture_cuda_graphs" if d == "N" else "init_cuda_graphs"
        return draft_worker(d)[:-1] + [
            (worker, 180, func, "self.cuda_graph_runner = EAGLEDraftCudaGraphRunner(self)"),
            ("sglang/srt/speculative/eagle_draft_cuda_graph_runner.py", 120, "__init__", "self.capture()"),
            ("sglang/srt/model_executor/cuda_graph_runner.py", 520, "capture", None),
        ]
    if point in ("warmup", "runtime"):
        return [
            ("sglang/srt/managers/scheduler.py", 3210, "run_scheduler_process", "scheduler.event_loop_normal()"),
            ("sglang/srt/managers/scheduler.py", 940, "event_loop_normal", "result = self.run_batch(batch)"),
            ("sglang/srt/managers/scheduler.py", 1800, "run_batch", "batch_result = self.draft_worker.forward_batch_generation(batch)"),
            ("sglang/srt/speculative/eagle_worker.py", 300, "forward_batch_generation", "self.forward_draft_extend("),
            ("sglang/srt/models/llama_eagle3.py", 120, "forward", "hidden_states = self.fc(hidden_states)"),
        ]
    raise ValueError(point)


LAUNCH = [
    ("<frozen runpy>", 198, "_run_module_as_main", None),
    ("<frozen runpy>", 88, "_run_code", None),
    ("sglang/launch_server.py", 11, "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
    ("sglang/srt/server_args.py", 1890, "prepare_server_args", "server_args = ServerArgs.from_cli_args(raw_args)"),
    ("sglang/srt/server_args.py", 1850, "from_cli_args", "return cls(**{attr: getattr(args, attr) for attr in attrs})"),
    ("<string>", 250, "__init__", None),
    ("sglang/srt/server_args.py", 640, "__post_init__", None),
]

CTX_MSG = (
    "Warning: {reason} context_length ({context_length}) is greater than the derived context_length ({derived_context_len}). "
    "This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ from max_position_embeddings in the model's config."
)


def ctx_msg(reason, context_length, derived_context_len):
    return CTX_MSG.format(reason=reason, context_length=context_length, derived_context_len=derived_context_len)


def ctx_error(reason, a, b):
    return f"ValueError: {ctx_msg(reason, a, b)} To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"


def finding(id, severity, phase, remedies=()):
    return {"id": id, "severity": severity, "phase": phase, "remedies": [{"id": r, "changes": c} for r, c in remedies]}


CLAMP_ALLOW = [
    ("clamp-context-length", ["--context-length 131072"]),
    (
        "allow-longer-context",
        ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "draft config /max_position_embeddings = 262144 (in memory)"],
    ),
]
GRAPH_REMEDIES = {
    d: [("lower-mem-fraction-static", ["--mem-fraction-static 0.80"]), ("lower-cuda-graph-max-bs", [f"{flag} 4"])]
    for d, flag in [("C", "--cuda-graph-max-bs"), ("M", "--cuda-graph-max-bs"), ("N", "--cuda-graph-max-bs-decode")]
}
CUDA_GRAPH_CAPTURE_FAILED_MSG = {
    "C": "\nPossible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n3. disable torch compile by not using --enable-torch-compile\n4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n",
    "N": "\nPossible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n",
}
CUDA_GRAPH_CAPTURE_FAILED_MSG["M"] = CUDA_GRAPH_CAPTURE_FAILED_MSG["C"]
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB memory in use."


def sglang_cases():
    """(name, dialects, build(b) -> None, expected findings, final, args)."""
    cases = []

    def case(name, dialects, build, findings, final="failed", **args):
        cases.append((name, dialects, build, findings, final, args))

    # §1.4-A context length
    def ctx_draft_error(b):
        b.run_until("draft_init")
        b.scheduler_crash(stack(b.d, "draft_init"), [ctx_error("Target model's", 262144, 131072)])

    case("context-draft-error", "CMN", ctx_draft_error, [finding("context-length-exceeds-draft", "error", "drafter-init", CLAMP_ALLOW)])

    def ctx_draft_warning(b):
        b.run_until("draft_init")
        b.ranks(ctx_msg("Target model's", 262144, 131072))
        if b.d != "C":
            b.ranks(f"Overriding the draft model's max_position_embeddings to {262144}.")
        b.run_from("draft_init")
        b.decode(4, 2.31)

    case(
        "context-draft-warning",
        "CMN",
        ctx_draft_warning,
        [finding("context-length-exceeds-draft", "warning", "drafter-init", [("clamp-context-length", ["--context-length 131072"])])],
        final="ready",
    )

    def ctx_target_error(b):
        b.run_until("init")
        b.main_crash(
            LAUNCH + [("sglang/srt/configs/model_config.py", 98, "__init__" if b.d == "C" else "_derive_context_length", "raise ValueError(")],
            [ctx_error("User-specified", 300000, 131072)],
        )

    case(
        "context-target-error",
        "CMN",
        ctx_target_error,
        [
            finding(
                "context-length-exceeds-target",
                "error",
                "preflight",
                [("clamp-context-length", ["--context-length 131072"]), ("allow-longer-context", ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"])],
            )
        ],
        context_length=300000,
    )

    def ctx_override_fault(b):
        b.run_until("draft_init")
        b.ranks(ctx_msg("Target model's", 262144, 131072))
        b.run_from("draft_init")
        b.decode(2, 2.4)
        b.bare(
            '/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:163: operator(): block: [0,0,0], thread: [0,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && "scatter gather kernel index out of bounds"` failed.'
        )
        b.scheduler_crash(stack(b.d, "runtime"), ["RuntimeError: CUDA error: device-side assert triggered"])

    case(
        "context-override-device-fault",
        "C",
        ctx_override_fault,
        [
            finding("context-length-exceeds-draft", "warning", "drafter-init", [("clamp-context-length", ["--context-length 131072"])]),
            finding("context-length-exceeds-draft", "error", "serving", [("clamp-context-length", ["--context-length 131072"])]),
        ],
    )

    # §1.4-B/C target and draft classes
    def no_capture_hook(b):
        b.run_until("attention")
        if b.d == "N":
            exc = f"ValueError: Model {'Qwen3VLMoeForConditionalGeneration'} does not implement set_eagle3_layers_to_capture, which EAGLE3 aux hidden-state capture requires."
        else:
            exc = f"AttributeError: '{'Qwen3VLMoeForConditionalGeneration'}' object has no attribute '{'set_eagle3_layers_to_capture'}'"
        b.scheduler_crash(stack(b.d, "attention"), [exc])

    case("target-no-eagle3-hook", "CMN", no_capture_hook, [finding("target-no-capture-support", "error", "target-graph-capture")])

    def no_embed_hook(b):
        b.run_until("draft_kv" if b.d != "N" else "attention")
        b.scheduler_crash(stack(b.d, "embed"), ["AttributeError: 'DeepseekV3ForCausalLM' object has no attribute 'get_embed_and_head'"])

    case("target-no-embed-and-head", "CMN", no_embed_hook, [finding("target-no-capture-support", "error", "drafter-init")])

    def draft_no_set_embed(b):
        b.run_until("draft_kv" if b.d != "N" else "attention")
        b.scheduler_crash(stack(b.d, "embed")[:-1], ["AttributeError: 'Qwen2ForCausalLM' object has no attribute 'set_embed'"])

    case(
        "draft-not-eagle",
        "CMN",
        draft_no_set_embed,
        [finding("draft-architecture", "error", "drafter-init", [("draft-architecture-eagle3", ['draft config /architectures = ["LlamaForCausalLMEagle3"] (in memory)', 'draft config /model_type = "llama" (in memory)'])])],
    )

    def draft_no_single_embedding(b):
        b.run_until("attention")
        b.scheduler_crash(stack(b.d, "embed")[:-1], [f"ValueError: Draft model {'LlamaForCausalLM'} has no single input embedding for target embedding sharing."])

    case("draft-no-single-embedding", "N", draft_no_single_embedding, [finding("draft-architecture", "error", "drafter-init")])

    # §1.4-D draft architecture / format
    def draft_registry(b):
        b.run_until("draft_load")
        b.scheduler_crash(
            stack(b.d, "draft_load") + [("sglang/srt/models/registry.py", 70, "_raise_for_unsupported", "raise ValueError(")],
            [f"ValueError: Model architectures {['Eagle3Speculator']} are not supported for now. Supported architectures: {['LlamaForCausalLM', 'LlamaForCausalLMEagle3']}"],
        )

    case("draft-architecture-unregistered", "CMN", draft_registry, [finding("draft-architecture", "error", "drafter-load")])

    def draft_midlayer(b):
        b.run_until("draft_load")
        b.scheduler_crash(
            stack(b.d, "draft_load") + [("sglang/srt/models/qwen3.py", 480, "load_weights", "param = params_dict[name]")],
            ["KeyError: 'midlayer.self_attn.qkv_proj.weight'"],
        )

    case(
        "draft-exported-as-target",
        "CMN",
        draft_midlayer,
        [finding("draft-architecture", "error", "drafter-load", [("draft-architecture-eagle3", ['draft config /architectures = ["LlamaForCausalLMEagle3"] (in memory)', 'draft config /model_type = "llama" (in memory)'])])],
    )

    def draft_layers(b):
        b.run_until("draft_load")
        b.scheduler_crash(
            stack(b.d, "draft_load") + [("sglang/srt/models/llama_eagle3.py", 160, "__init__", "raise ValueError(\"EAGLE3 currently only supports 1 layer\")")],
            ["ValueError: EAGLE3 currently only supports 1 layer"],
        )

    case("draft-layers", "CM", draft_layers, [finding("draft-layers", "error", "drafter-load")])

    def unknown_algorithm(b):
        b.run_until("init")
        b.main_crash(LAUNCH + [("sglang/srt/speculative/spec_info.py", 60, "from_string", None)], [f"ValueError: Unknown speculative algorithm name: {'EAGLE-3'}"])

    case("unknown-algorithm", "CMN", unknown_algorithm, [finding("speculative-args", "error", "preflight")])

    def gemma_assistant(b):
        b.run_until("init")
        b.main_crash(
            LAUNCH + [("sglang/srt/arg_groups/speculative_hook.py", 90, "_resolve_speculative_algorithm_alias", "raise ValueError(")],
            ["ValueError: Gemma4AssistantForCausalLM draft requires --speculative-algorithm NEXTN or EAGLE; EAGLE3 is not supported for this draft architecture."],
        )

    case("gemma-assistant-eagle3", "N", gemma_assistant, [finding("algorithm-mismatch", "error", "preflight", [("algorithm-eagle", ["--speculative-algorithm EAGLE"])])])

    def unknown_model_type(b):
        b.run_until("draft_init")
        b.scheduler_crash(
            stack(b.d, "draft_init")[:-1]
            + [
                ("transformers/models/auto/configuration_auto.py", 1151, "from_pretrained", 'config_class = CONFIG_MAPPING[config_dict["model_type"]]'),
                ("transformers/models/auto/configuration_auto.py", 840, "__getitem__", "raise KeyError(key)"),
            ],
            ["KeyError: 'kimi_k2_eagle3_mla'"],
        )

    case("draft-model-type-unknown", "MN", unknown_model_type, [finding("unsupported-architecture", "error", "drafter-init")])

    # §1.4-E silent algorithm mismatch
    def eagle3_under_eagle(b):
        b.run_until("end")
        b.decode(20, 1.00)

    case(
        "eagle3-draft-under-eagle",
        "CMN",
        eagle3_under_eagle,
        [finding("algorithm-mismatch", "error", "preflight", [("algorithm-eagle3", ["--speculative-algorithm EAGLE3"])])],
        final="ready",
        speculative_algorithm="EAGLE",
    )

    # §1.4-F hidden sizes / aux layers
    def shapes(b):
        b.run_until("ready")
        b.scheduler_crash(stack(b.d, "warmup"), ["RuntimeError: mat1 and mat2 shapes cannot be multiplied (7x12288 and 6144x4096)"])
        b.main(
            "Initialization failed. warmup error: Traceback (most recent call last):"
        )
        b.lines.extend(
            Frames.render([("sglang/srt/entrypoints/http_server.py", 1000, "_execute_server_warmup", "res = requests.post(")])
            + ["requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))"]
        )

    case("hidden-size-shape-error", "CMN", shapes, [finding("hidden-size-mismatch", "error", "warmup")])

    def aux_range(b):
        b.run_until("init")
        b.main_crash(LAUNCH, [f"ValueError: --return-aux-hidden-state-layer-ids {[40]} out of range for a target with {36} layers."])

    case("aux-layers-out-of-range", "N", aux_range, [finding("aux-layer-out-of-range", "error", "preflight")])

    # §1.4-G vocab
    def vocab_rejection(b):
        b.run_until("attention")
        b.scheduler_crash(
            stack(b.d, "embed")[:-1],
            ["ValueError: --speculative-use-rejection-sampling requires the draft and target to share one vocab, but the draft vocab " f"({32000}) != target vocab ({128256})."],
        )

    case("vocab-rejection-sampling", "N", vocab_rejection, [finding("vocab-mismatch", "error", "drafter-init")])

    def vocab_standalone(b):
        b.run_until("attention")
        b.scheduler_crash(
            stack(b.d, "embed")[:-1],
            [f"ValueError: STANDALONE speculative decoding requires the draft model to share the same vocabulary as the target model, but got target vocab_size={128256} and draft vocab_size={151936}. Use a draft model with a matching vocabulary, or a speculative algorithm that supports heterogeneous vocabularies."],
        )

    case("vocab-standalone", "N", vocab_standalone, [finding("vocab-mismatch", "error", "drafter-init")])

    # §1.4-H speculative arguments (all raised while resolving arguments)
    def arg_error(exc, code=None):
        def build(b):
            b.run_until("init")
            frames = LAUNCH[:-1] + [("sglang/srt/server_args.py", 640, "__post_init__", code)]
            b.main_crash(frames, [exc])

        return build

    topk_page = {
        "C": 'ValueError: speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for paged attention backends. This combination is only supported for the \'flashinfer\' backend.',
        "N": "ValueError: speculative_eagle_topk > 1 with page_size > 1 is only supported on {}; got attention_backend={!r}. Use page_size == 1 or one of those backends.".format(("flashinfer", "fa3", "triton"), "trtllm_mha"),
    }
    topk_page["M"] = topk_page["C"]
    for d in "CMN":
        case(
            "topk-with-page-size",
            d,
            arg_error(topk_page[d]),
            [finding("speculative-args", "error", "preflight", [("page-size-1", ["--page-size 1"]), ("eagle-topk-1", ["--speculative-eagle-topk 1"])])],
        )
    case(
        "trtllm-mha-topk",
        "CMN",
        arg_error("ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding."),
        [finding("speculative-args", "error", "preflight", [("eagle-topk-1", ["--speculative-eagle-topk 1"])])],
    )
    case(
        "spec-v2-topk",
        "M",
        arg_error("ValueError: Spec v2 currently only supports topk = 1 for speculative decoding."),
        [finding("speculative-args", "error", "preflight", [("eagle-topk-1", ["--speculative-eagle-topk 1"]), ("disable-spec-v2", ["unset SGLANG_ENABLE_SPEC_V2"])])],
    )
    speculative_num_draft_tokens, speculative_num_steps = 8, 5
    case(
        "draft-tokens-steps",
        "N",
        arg_error(f"AssertionError: topk=1 requires speculative_num_draft_tokens == speculative_num_steps + 1, got {speculative_num_draft_tokens} and {speculative_num_steps}"),
        [finding("speculative-args", "error", "preflight", [("draft-tokens-steps-plus-1", ["--speculative-num-draft-tokens 6"])])],
    )
    case(
        "auto-params-assert",
        "CMN",
        arg_error("AssertionError", "assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None"),
        [finding("speculative-args", "error", "preflight")],
    )
    case(
        "rejection-sampling-topk",
        "N",
        arg_error("ValueError: --speculative-use-rejection-sampling requires --speculative-eagle-topk=1."),
        [finding("speculative-args", "error", "preflight", [("eagle-topk-1", ["--speculative-eagle-topk 1"])])],
    )
    case(
        "rejection-sampling-algorithm",
        "N",
        arg_error("ValueError: --speculative-use-rejection-sampling is only supported for EAGLE / EAGLE3 / NEXTN, not speculative_algorithm=NGRAM"),
        [finding("speculative-args", "error", "preflight")],
    )
    case(
        "pipeline-parallel-spec",
        "CM",
        arg_error("AssertionError: Pipeline parallelism is not compatible with overlap schedule, speculative decoding, mixed chunked prefill."),
        [finding("speculative-args", "error", "preflight", [("pp-size-1", ["--pp-size 1"])])],
    )
    case(
        "standalone-dp-attention",
        "CMN",
        arg_error("AssertionError: Currently standalone speculative decoding does not support dp attention."),
        [finding("speculative-args", "error", "preflight")],
    )
    case(
        "adaptive-steps",
        "N",
        arg_error("ValueError: --speculative-num-steps={} is not in the adaptive config candidate_steps {}. Pass one of those values.".format(4, [1, 3, 5])),
        [finding("speculative-args", "error", "preflight")],
    )
    case(
        "flex-attention",
        "M",
        arg_error("AssertionError: Speculative decoding is currently not supported with Flex Attention backend"),
        [finding("speculative-args", "error", "preflight")],
    )
    case(
        "chunked-prefill-page-size",
        "CMN",
        arg_error("AssertionError: chunked_prefill_size must be divisible by page_size"),
        [finding("speculative-args", "error", "preflight")],
    )
    case(
        "mixed-chunk",
        "C",
        arg_error("AssertionError: enable_mixed_chunk is required for speculative decoding"),
        [finding("speculative-args", "error", "preflight", [("disable-mixed-chunk", ["remove --enable-mixed-chunk"])])],
    )

    # §1.4-I draft attention backends
    def draft_backend(exc):
        def build(b):
            b.run_until("draft_capture_begin" if b.d != "N" else "attention")
            b.scheduler_crash(stack(b.d, "embed")[:-1] + [("sglang/srt/speculative/draft_utils.py", 60, "create_decode_backend", "raise ValueError(")], [exc])

        return build

    for d, flag in [("C", "--attention-backend"), ("M", "--speculative-draft-attention-backend"), ("N", "--speculative-draft-attention-backend")]:
        case(
            "draft-attention-backend",
            d,
            draft_backend("ValueError: EAGLE is not supported in decode attention backend torch_native"),
            [finding("draft-attention-backend", "error", "drafter-init", [("draft-attention-backend-flashinfer", [f"{flag} flashinfer"])])],
        )
    case(
        "draft-mla-backend",
        "CMN",
        draft_backend("ValueError: trtllm_mla backend requires MLA model (use_mla_backend=True)."),
        [finding("draft-attention-backend", "error", "drafter-init", [("draft-attention-backend-trtllm-mha", ["--speculative-draft-attention-backend trtllm_mha"])])],
    )

    # §1.4-J tensor parallelism
    def heads_assert(b):
        b.run_until("draft_load")
        b.scheduler_crash(
            stack(b.d, "draft_load")
            + [
                ("sglang/srt/models/llama_eagle3.py", 60, "__init__", "self.midlayer = LlamaDecoderLayer(config, 0, quant_config, prefix)"),
                ("sglang/srt/models/llama.py", 140, "__init__", "assert self.total_num_heads % tp_size == 0"),
            ],
            ["AssertionError"],
        )

    case("draft-heads-tp", "CMN", heads_assert, [finding("tp-divisibility", "error", "drafter-load")], tp_size=48)

    def divisibility(b):
        b.run_until("target_load")
        b.scheduler_crash(stack(b.d, "target_load") + [("sglang/srt/distributed/utils.py", 20, "ensure_divisibility", 'assert numerator % denominator == 0, "{} is not divisible by {}".format(')], [f"AssertionError: {14336} is not divisible by {48}"])

    case("tp-divisibility", "CMN", divisibility, [finding("tp-divisibility", "error", "target-load", [("tp-size-divisor", ["--tp-size 32"])])], tp_size=48)

    def unbalanced(b):
        b.run_until("target_load_begin")
        min_per_gpu_memory, local_gpu_memory = 70.1, 79.1
        b.scheduler_crash(
            stack(b.d, "target_load")[:5],
            [f"ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. {min_per_gpu_memory=}, {local_gpu_memory=}, {local_gpu_memory * 0.9=}"],
        )

    for d, change in [("C", "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1"), ("M", "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1"), ("N", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK=0")]:
        case("memory-unbalanced", d, unbalanced, [finding("gpu-memory-unbalanced", "error", "target-load", [("skip-memory-balance-check", [change])])])

    case("tp-nodes", "CMN", arg_error("AssertionError: tp_size must be divisible by number of nodes"), [finding("tp-divisibility", "error", "preflight")])

    # §1.4-K memory
    mem_fraction_static = 0.7
    not_enough = {
        "C": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "M": f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: {mem_fraction_static=}".replace("mem_fraction_static=", "self.server_args.mem_fraction_static="),
        "N": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." + f" Current value: mem_fraction_static={mem_fraction_static}",
    }

    def kv_small(b):
        b.run_until("kv")
        b.scheduler_crash(stack(b.d, "kv"), [not_enough[b.d]])

    for d in "CMN":
        case("kv-not-enough-memory", d, kv_small, [finding("memory-budget", "error", "kv-alloc", [("raise-mem-fraction-static", ["--mem-fraction-static 0.75"])])], mem_fraction_static=0.7)

    def kv_no_room(b):
        b.run_until("kv")
        suggested_mem_fraction_static, minimum_mem_fraction_static = 0.8431, 0.8231
        b.scheduler_crash(
            stack(b.d, "kv"),
            [f"ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={0.8}. Raise --mem-fraction-static above {suggested_mem_fraction_static:.3f} (minimum viable = 1 - available/pre = {minimum_mem_fraction_static:.4f}). If using speculative decoding, draft weights are now counted."],
        )

    case("kv-weights-leave-no-room", "N", kv_no_room, [finding("memory-budget", "error", "kv-alloc", [("raise-mem-fraction-static", ["--mem-fraction-static 0.86"])])], mem_fraction_static=0.8)

    def graph_oom(b):
        b.run_until("draft_capture")
        frames = stack(b.d, "draft_capture")
        b.tick()
        for r in sorted(range(b.tp), key=lambda _: b.rng.random()):
            b.lines.append(f"[{b.stamp()} TP{r}] Scheduler hit an exception: Traceback (most recent call last):")
            b.lines.extend(Frames.render(frames + [("torch/cuda/graphs.py", 80, "capture_begin", None)]))
            b.lines.append(f"torch.OutOfMemoryError: {OOM}")
            b.lines.append("")
            b.lines.append("During handling of the above exception, another exception occurred:")
            b.lines.append("")
            b.lines.append("Traceback (most recent call last):")
            b.lines.extend(Frames.render(frames[:-1] + [("sglang/srt/speculative/eagle_draft_cuda_graph_runner.py", 124, "__init__", "raise Exception(")]))
            b.lines.extend(f"Exception: Capture cuda graph failed: {OOM}{CUDA_GRAPH_CAPTURE_FAILED_MSG[b.d]}".split("\n"))
        b.main("Received sigquit from a child process. It usually means the child failed.")

    for d in "CMN":
        case("graph-capture-oom", d, graph_oom, [finding("out-of-memory", "error", "draft-graph-capture", GRAPH_REMEDIES[d])])

    def load_oom(b):
        b.run_until("target_load")
        frames = stack(b.d, "target_load") + [("sglang/srt/models/llama.py", 600, "load_weights", "weight_loader(param, loaded_weight)")]
        b.scheduler_crash(frames, [f"torch.OutOfMemoryError: {OOM}"], ranks=[b.tp - 1])
        if b.tp > 1:
            for r in range(b.tp - 1):
                tp_rank = r
                b.lines.append(f"[{b.stamp()} TP{r}] Scheduler hit an exception: Traceback (most recent call last):")
                b.lines.extend(Frames.render(stack(b.d, "target_load")[:5] + [("sglang/srt/model_executor/model_runner.py", 760, "load_model", "raise ValueError(")]))
                b.lines.append(
                    f"ValueError: TP rank {tp_rank} could finish the model loading, but there are other ranks that didn't finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow node."
                )

    for d in "CMN":
        # Twice the TP size the argument dump shows.
        case("weights-oom", d, load_oom, lambda tp: [finding("out-of-memory", "error", "target-load", [("increase-tp-size", [f"--tp-size {tp * 2}"])])])

    def killed(b):
        b.run_until("target_load")
        if b.d == "C":
            b.main(f"Rank {0} scheduler is dead. Please check if there are relevant logs.")
            b.main(f"Exit code: {-9}")
        else:
            rank, exitcode = 0, -9
            b.main(f"Rank {rank} scheduler died during initialization (exit code: {exitcode}). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.")

    case("scheduler-oom-killed", "CN", killed, [finding("scheduler-killed", "error", "target-load")])

    def max_total_tokens(b):
        b.run_until("kv")
        b.ranks(f"max_total_tokens={500000} is larger than the profiled value {411880}. Use the profiled value instead.", rank0=True)
        b.run_from("kv")

    case("max-total-tokens", "CMN", max_total_tokens, [finding("memory-budget", "warning", "kv-alloc")], final="ready")

    # §1.4-L dtype
    def sm80(b):
        b.run_until("target_load_begin")
        b.ranks("Compute capability below sm80. Use float16 due to lack of bfloat16 support.")
        b.run_from("target_load_begin")

    case("fp16-below-sm80", "CM", sm80, [finding("dtype-mismatch", "warning", "target-load")], final="ready")

    def sm75(b):
        b.run_until("target_load")
        b.scheduler_crash(stack(b.d, "target_load")[:6], ["RuntimeError: SGLang only supports sm75 and above."])

    case("gpu-below-sm75", "CM", sm75, [finding("gpu-unsupported", "error", "target-load")])

    def nan(b):
        b.run_until("end")
        b.decode(2, 2.2)
        b.scheduler_crash(stack(b.d, "runtime")[:4] + [("sglang/srt/speculative/eagle_worker.py", 900, "_detect_nan_if_needed", "raise ValueError(\"Detected errors during sampling! NaN in the logits.\")")], ["ValueError: Detected errors during sampling! NaN in the logits."])

    case("nan-logits", "C", nan, [finding("nan-logits", "error", "serving")])

    # §1.4-M quantization
    def quant_mismatch(b):
        b.run_until("draft_load")
        quant_method, quantization = "fp8", "modelopt_fp4"
        b.scheduler_crash(
            stack(b.d, "draft_load")[:-3] + [("sglang/srt/configs/model_config.py", 700, "_verify_quantization", "raise ValueError(")],
            ["ValueError: Quantization method specified in the model config " f"({quant_method}) does not match the quantization " f"method specified in the `quantization` argument " f"({quantization})."],
        )

    case(
        "draft-quantization-mismatch",
        "N",
        quant_mismatch,
        [finding("quantization-mismatch", "error", "drafter-init", [("draft-quantization", ["--speculative-draft-model-quantization fp8"])])],
    )

    def quant_differs(b):
        b.run_until("draft_load")
        quant_method, quantization = "fp8", "modelopt_fp4"
        b.ranks(f"Draft model quantization ({quant_method}) differs from main model quantization ({quantization}). Using draft model's detected quantization: {quant_method}")
        b.run_from("draft_load")

    case("draft-quantization-differs", "N", quant_differs, [finding("quantization-mismatch", "info", "drafter-load")], final="ready")

    def modelopt(b):
        b.run_until("draft_load")
        b.scheduler_crash(stack(b.d, "draft_load"), [f"ValueError: Invalid quant_config, quantization method: {'modelopt_fp4'},hf architectures: {['Eagle3DeepseekV2ForCausalLM']}. "])

    case("draft-modelopt-quant", "N", modelopt, [finding("quantization-mismatch", "error", "drafter-load")])

    # §1.4-N runtime
    def too_long(b):
        b.run_until("end")
        b.decode(2, 2.5)
        input_token_num, context_len = 140000, 131072
        b.main(f"The input ({input_token_num} tokens) is longer than the model's context length ({context_len} tokens).")

    case("request-too-long", "N", too_long, [finding("request-too-long", "warning", "serving")], final="ready")

    def input_too_long(b):
        b.run_until("end")
        b.ranks(f"Input length ({140000} tokens) exceeds the maximum allowed length ({131072} tokens). Use a shorter input or enable --allow-auto-truncate.", rank0=True)

    case("input-exceeds-max", "CN", input_too_long, [finding("request-too-long", "warning", "serving")], final="ready")

    def bare_fault(b):
        b.run_until("end")
        b.decode(2, 2.5)
        b.scheduler_crash(stack(b.d, "runtime"), ["RuntimeError: CUDA error: an illegal memory access was encountered"])

    case("illegal-memory-access", "CMN", bare_fault, [finding("illegal-memory-access", "error", "serving", [("cuda-launch-blocking", ["CUDA_LAUNCH_BLOCKING=1"])])])

    def token_map_tp(b):
        b.run_until("end")
        b.scheduler_crash(stack(b.d, "runtime")[:4], ["RuntimeError: EE9999: Inner Error! (IndexCheckKernel: Index out of range in dimension 0)"])

    case(
        "token-map-with-tp",
        "C",
        token_map_tp,
        [finding("draft-vocab-map", "error", "serving", [("tp-size-1", ["--tp-size 1"])])],
        speculative_token_map="thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt",
        tp_size=2,
        speculative_algorithm="EAGLE",
        draft_cls="LlamaForCausalLMEagle",
    )

    # §1.3: an error replay cannot pin down, and the scheduler dying without a traceback
    def unknown(b):
        b.run_until("draft_capture_begin")
        b.scheduler_crash(stack(b.d, "draft_capture")[:-1], ["RuntimeError: Triton Error [CUDA]: invalid argument"])

    # An error no rule knows, raised inside draft graph capture.
    case("unrecognized-error", "CMN", unknown, [finding("cuda-graph-capture-failed", "error", "draft-graph-capture", [("lower-cuda-graph-max-bs", ["--cuda-graph-max-bs 4"]), ("disable-cuda-graph", ["--disable-cuda-graph "])])])

    def dead(b):
        b.run_until("kv")
        b.main(f"Rank {0} scheduler is dead. Please check if there are relevant logs.")
        b.main(f"Exit code: {1}")

    case("scheduler-dead", "C", dead, [finding("unrecognized-failure", "error", "target-load")])

    def success(b):
        b.run_until("end")
        b.decode(6, 2.85)

    case("success", "CMN", success, [], final="ready")
    return cases


# ---------------------------------------------------------------------------------------------
# vLLM


class Vllm:
    def __init__(self, dialect, tp, seed, method="eagle3"):
        self.d = dialect
        self.tp = tp
        self.rng = random.Random(seed)
        self.t = datetime.datetime(2026, 3, 2, 10, 0, 0)
        self.lines = []
        self.method = method
        self.version = "0.10.2" if dialect == "V10" else "0.33.0"

    def tick(self, s=1):
        self.t += datetime.timedelta(seconds=s)

    def stamp(self):
        return self.t.strftime("%m-%d %H:%M:%S")

    def proc(self, name):
        pid = {"APIServer": 100, "EngineCore_DP0": 200}.get(name) or 300 + int(name.rsplit("TP", 1)[1])
        return f"({name} pid={pid})"

    def log(self, name, level, src, msg):
        self.lines.append(f"{self.proc(name)} {level} {self.stamp()} [{src}] {msg}")

    def api(self, src, msg):
        self.log("APIServer", "INFO", src, msg)

    def core(self, src, msg):
        self.log("EngineCore_DP0", "INFO", src, msg)

    def workers(self, src, msg, level="INFO"):
        names = ["EngineCore_DP0"] if self.tp == 1 else [f"Worker_TP{r}" for r in range(self.tp)]
        self.rng.shuffle(names)
        for n in names:
            self.log(n, level, src, msg)

    def bare(self, name, text):
        self.lines.append(f"{self.proc(name)} {text}")

    def spec_config(self):
        return {"method": self.method, "model": DRAFT, "num_speculative_tokens": 3}

    # stages
    def args(self, **extra):
        if self.d == "V10":
            self.api("api_server.py:1805", "vLLM API server version %s" % self.version)
        else:
            self.api("startup.py:120", "vLLM server version %s, serving model %s" % (self.version, TARGET))
            args = {"model": TARGET, "speculative_config": self.spec_config(), "tensor_parallel_size": self.tp}
            args.update(extra)
            self.api("utils.py:328", "non-default args: %s" % args)
        self.tick()
        self.core(
            "core.py:654",
            "Initializing a V1 LLM engine (v%s) with config: %s"
            % (self.version, f"model='{TARGET}', speculative_config=SpeculativeConfig(method='{self.method}', model='{DRAFT}', num_spec_tokens=3), tensor_parallel_size={self.tp}"),
        )

    def load(self):
        names = ["EngineCore_DP0"] if self.tp == 1 else [f"Worker_TP{r}" for r in range(self.tp)]
        for r, n in enumerate(names):
            fmt = "rank %s in world size %s is assigned as DP rank %s, PP rank %s, TP rank %s, EP rank %s"
            args = (r, self.tp, 0, 0, r, r)
            if self.d == "V33":
                fmt = "rank %s in world size %s is assigned as DP rank %s, PP rank %s, PCP rank %s, TP rank %s, ETP rank %s, EP rank %s, EPLB rank %s"
                args = (r, self.tp, 0, 0, 0, r, r, r, r)
            self.log(n, "INFO", "parallel_state.py:1134", fmt % args)
        self.workers("gpu_model_runner.py:2338", "Starting to load model %s..." % TARGET)
        first = "EngineCore_DP0" if self.tp == 1 else "Worker_TP0"
        self.bare(first, tqdm_frames(lambda _: "Loading safetensors checkpoint shards", 4, custom=True))
        self.tick(30)
        self.workers("default_loader.py:268", "Loading weights took %.2f seconds" % 30.21)

    def load_draft(self):
        self.workers("gpu_model_runner.py:2370", "Loading drafter model...")
        self.tick(2)
        self.workers("default_loader.py:268", "Loading weights took %.2f seconds" % 0.42)

    def draft_setup(self):
        if self.d == "V10":
            self.workers("eagle.py:700", "Assuming the EAGLE head shares the same vocab embedding with the target model.")
        else:
            self.workers(
                "llm_base_proposer.py:300",
                "Detected EAGLE model without its own embed_tokens in the checkpoint. Sharing target model embedding weights with the draft model.",
            )
            self.workers("gpu_model_runner.py:2400", "Using auxiliary layers from speculative config: %s" % ((2, 16, 29),))
        if self.d == "V10":
            self.workers("gpu_model_runner.py:2392", "Model loading took %.4f GiB and %.6f seconds" % (15.4321, 32.123456))
        else:
            self.workers("gpu_model_runner.py:2392", "Model loading took %s GiB memory and %.6f seconds" % ("15.43", 32.123456))

    def kv(self):
        self.tick(10)
        self.core("monitor.py:34", "torch.compile takes %.2f s in total" % 12.34)
        self.workers("gpu_worker.py:298", "Available KV cache memory: %.2f GiB" % 52.31 if self.d == "V10" else "Available KV cache memory: %s GiB" % "52.31")
        if self.d == "V10":
            self.core("kv_cache_utils.py:864", "GPU KV cache size: %s tokens" % "428,496")
            self.core("kv_cache_utils.py:868", "Maximum concurrency for %s tokens per request: %.2fx" % ("8,192", 52.31))
        else:
            self.core("kv_cache_utils.py:864", "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx" % ("GPU", "428,496", "8,192", 52.31))

    def capture(self):
        first = "EngineCore_DP0" if self.tp == 1 else "Worker_TP0"
        self.bare(first, tqdm_frames(lambda _: "Capturing CUDA graphs ({}, {})".format("mixed prefill-decode", "PIECEWISE"), 5))
        self.tick(6)
        self.workers("gpu_model_runner.py:3118", "Graph capturing finished in %.0f secs, took %.2f GiB" % (6.2, 0.52))

    def ready(self):
        self.core("core.py:218", "init engine (profile, create kv cache, warmup model) took %.2f seconds" % 25.32 if self.d == "V10" else "init engine (profile, create kv cache, warmup model) took %.2f s" % 25.32)
        if self.d == "V10":
            self.api("api_server.py:1600", "Starting vLLM API server %d on %s" % (0, "http://0.0.0.0:8000"))
        else:
            self.api("api_server.py:1600", "Starting vLLM server on %s" % "http://0.0.0.0:8000")
        self.api("launcher.py:36", "Available routes are:")
        for line in ["INFO:     Started server process [100]", "INFO:     Waiting for application startup.", "INFO:     Application startup complete."]:
            self.bare("APIServer", line)
        self.tick()

    def metrics(self, n, accept):
        for i in range(n):
            self.api("loggers.py:310", "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: 1 reqs, Waiting: 0 reqs" % (93.9, 130.0 + i))
            self.api("metrics.py:120", "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: 12.30 tokens/s, Drafted throughput: 30.10 tokens/s, Accepted: 92 tokens, Drafted: 259 tokens" % accept)
            self.tick(10)

    def order(self):
        return [
            ("args", self.args),
            ("load", self.load),
            ("load_draft", self.load_draft),
            ("draft_setup", self.draft_setup),
            ("kv", self.kv),
            ("capture", self.capture),
            ("ready", self.ready),
        ]

    def run_until(self, point):
        for name, stage in self.order():
            if name == point:
                return
            stage()

    def run_from(self, point):
        started = False
        for name, stage in self.order():
            started = started or name == point
            if started:
                stage()

    def crash(self, frames, exc_lines, where="workers", api_wrapper=True):
        """A start-up exception: worker(s) or the engine core log it line by line with their
        header (so ranks interleave), then the API server's bare traceback."""
        self.tick()
        tb = ["Traceback (most recent call last):"] + Frames.render(frames) + exc_lines
        if where == "workers" and self.tp > 1:
            names = [f"Worker_TP{r}" for r in range(self.tp)]
            src = "multiproc_executor.py:671"
            for n in names:
                self.log(n, "ERROR", src, "WorkerProc failed to start.")
            for line in tb:  # interleave the ranks line by line
                order = names[:]
                self.rng.shuffle(order)
                for n in order:
                    self.log(n, "ERROR", src, line)
            core_tb = ["Traceback (most recent call last):"] + Frames.render([("vllm/v1/engine/core.py", 709, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)")]) + [
                "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause."
            ]
            self.log("EngineCore_DP0", "ERROR", "core.py:718", "EngineCore failed to start.")
            for line in core_tb:
                self.log("EngineCore_DP0", "ERROR", "core.py:718", line)
        elif where in ("workers", "core", "core-runtime"):
            first = "EngineCore encountered a fatal error." if where == "core-runtime" else "EngineCore failed to start."
            self.log("EngineCore_DP0", "ERROR", "core.py:718", first)
            for line in tb:
                self.log("EngineCore_DP0", "ERROR", "core.py:718", line)
        if where == "api":
            for line in tb:
                self.bare("APIServer", line)
            return
        if api_wrapper:
            for line in ["Traceback (most recent call last):"] + Frames.render(
                [("vllm/entrypoints/openai/api_server.py", 1900, "run_server", "async with build_async_engine_client(args) as engine_client:"), ("vllm/v1/engine/utils.py", 880, "wait_for_engine_startup", "raise RuntimeError(")]
            ) + ["RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}"]:
                self.bare("APIServer", line)


def vstack(point):
    core = [
        ("vllm/v1/engine/core.py", 709, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        ("vllm/v1/engine/core.py", 505, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
        ("vllm/v1/engine/core.py", 82, "__init__", "self.model_executor = executor_class(vllm_config)"),
        ("vllm/v1/executor/abstract.py", 54, "__init__", "self._init_executor()"),
        ("vllm/v1/worker/gpu_worker.py", 213, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
    ]
    if point == "load":
        return core + [
            ("vllm/v1/worker/gpu_model_runner.py", 2341, "load_model", "self.model = model_loader.load_model("),
            ("vllm/model_executor/model_loader/base_loader.py", 49, "load_model", "self.load_weights(model, model_config)"),
        ]
    if point == "load_draft":
        return core + [
            ("vllm/v1/worker/gpu_model_runner.py", 2372, "load_model", "self.drafter.load_model(self.model)"),
            ("vllm/v1/spec_decode/eagle.py", 700, "load_model", "self.model = get_model(vllm_config=self.vllm_config,"),
            ("vllm/model_executor/model_loader/default_loader.py", 270, "load_weights", "loaded_weights = model.load_weights("),
        ]
    if point == "draft_setup":
        return core + [
            ("vllm/v1/worker/gpu_model_runner.py", 2380, "load_model", "self._setup_eagle3_aux_hidden_state_outputs()"),
            ("vllm/v1/worker/gpu_model_runner.py", 2450, "_setup_eagle3_aux_hidden_state_outputs", "raise RuntimeError("),
        ]
    if point == "kv":
        return core[:4] + [
            ("vllm/v1/engine/core.py", 90, "__init__", "self._initialize_kv_caches(vllm_config)"),
            ("vllm/v1/engine/core.py", 180, "_initialize_kv_caches", "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,"),
            ("vllm/v1/core/kv_cache_utils.py", 700, "check_enough_kv_cache_memory", "raise ValueError("),
        ]
    if point == "config":
        return [
            ("vllm/entrypoints/openai/api_server.py", 1880, "run_server", "vllm_config = engine_args.create_engine_config(usage_context=usage_context)"),
            ("vllm/engine/arg_utils.py", 1320, "create_engine_config", "speculative_config = self.create_speculative_config("),
            ("vllm/config/speculative.py", 380, "__post_init__", None),
        ]
    raise ValueError(point)


def vllm_cases():
    cases = []

    def case(name, dialects, build, findings, final="failed", method="eagle3"):
        cases.append((name, dialects, build, findings, final, {"method": method}))

    def allow_list(b):
        b.run_until("load")
        eagle3_target_supported = ["llama", "qwen"]
        b.crash(
            vstack("config"),
            [
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
                f"  Value error, Eagle3 is only supported for {eagle3_target_supported} models. Got self.target_model_config.hf_text_config.model_type='mistral' [type=value_error, input_value=ArgsKwargs((), {{'method': 'eagle3'}}), input_type=ArgsKwargs]",
            ],
            where="api",
        )

    case("eagle3-allow-list", "V10", allow_list, [finding("target-no-capture-support", "error", "preflight")])

    def no_interface(b):
        b.run_until("draft_setup")
        b.crash(vstack("draft_setup"), ["RuntimeError: Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested"])

    case("target-no-eagle3-interface", "V10 V33", no_interface, [finding("target-no-capture-support", "error", "drafter-init")])

    def eagle3_as_eagle(b):
        b.run_until("load")
        b.crash(
            vstack("config"),
            ["ValueError: Cannot find model module. 'EagleLlamaForCausalLMEagle3' is not a registered model in the Transformers library (only relevant if the model is meant to be in Transformers) and 'AutoModel' is not present in the model config's 'auto_map' (relevant if the model is custom)."],
            where="api",
        )

    case("eagle3-draft-method-eagle", "V10 V33", eagle3_as_eagle, [finding("algorithm-mismatch", "error", "preflight", [("algorithm-eagle3", ["--speculative-algorithm EAGLE3"])])], method="eagle")

    def unsupported_arch(b):
        b.run_until("load_draft")
        b.workers("gpu_model_runner.py:2370", "Loading drafter model...")
        b.crash(vstack("load_draft")[:-1] + [("vllm/model_executor/models/registry.py", 500, "_raise_for_unsupported", "raise ValueError(")], [f"ValueError: Model architectures {['EagleQwen2ForCausalLM']} are not supported for now. Supported architectures: dict_keys(['LlamaForCausalLM'])"])

    case("draft-architecture-unsupported", "V10 V33", unsupported_arch, [finding("draft-architecture", "error", "drafter-load")])

    def max_len(b):
        b.run_until("load")
        max_model_len, max_len_key, derived_max_model_len, model_max_length = 200000, "max_position_embeddings", 131072, None
        msg = f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len ({max_len_key}={derived_max_model_len} or model_max_length={model_max_length} in model's config.json)."
        warning = ""
        b.crash(vstack("config")[:2] + [("vllm/config/model.py", 1900, "_get_and_verify_max_len", "raise ValueError(")], [f"ValueError: {msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {warning}"], where="api")

    case(
        "max-model-len",
        "V10 V33",
        max_len,
        [finding("context-length-exceeds-target", "error", "preflight", [("clamp-max-model-len", ["--max-model-len 131072"]), ("allow-long-max-model-len", ["VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"])])],
    )

    def spec_len(b):
        b.run_until("load")
        speculative_max_model_len, draft_max_model_len = 8192, 2048
        b.crash(vstack("config"), [f"ValueError: {speculative_max_model_len=} cannot be larger than {draft_max_model_len=}"], where="api")

    case("speculative-max-model-len", "V10 V33", spec_len, [finding("context-length-exceeds-draft", "error", "preflight")])

    def override_fault(b):
        b.run_until("draft_setup")
        b.workers("eagle.py:120", "Overriding draft model max_position_embeddings from %d to the target model's max_model_len (%d); the draft shares the target's positional space." % (2048, 131072), level="WARNING")
        b.run_from("draft_setup")
        b.metrics(1, 2.6)
        b.crash(
            vstack("load")[:1] + [("vllm/v1/spec_decode/eagle.py", 300, "propose", "hidden_states = self.model(")],
            ["torch.AcceleratorError: CUDA error: device-side assert triggered", "index out of bounds: 0 <= tmp < 2048"],
            where="core-runtime",
            api_wrapper=False,
        )

    case(
        "draft-positions-override-fault",
        "V33",
        override_fault,
        [
            finding("context-length-exceeds-draft", "warning", "drafter-init", [("clamp-max-model-len", ["--max-model-len 2048"])]),
            finding("context-length-exceeds-draft", "error", "serving", [("clamp-max-model-len", ["--max-model-len 2048"])]),
        ],
    )

    def draft_tp(b):
        b.run_until("load")
        speculative_draft_tensor_parallel_size = 2
        b.crash(vstack("config"), [f"ValueError: {speculative_draft_tensor_parallel_size=} cannot be other value than 1 or target model tensor_parallel_size"], where="api")

    case("draft-tensor-parallel", "V10 V33", draft_tp, [finding("speculative-args", "error", "preflight")])

    def num_tokens(b):
        b.run_until("load")
        b.crash(vstack("config"), ["ValueError: num_speculative_tokens must be provided with speculative model unless the draft model config contains an n_predict parameter."], where="api")

    case("num-speculative-tokens", "V10 V33", num_tokens, [finding("speculative-args", "error", "preflight")])

    def method(b):
        b.run_until("load")
        b.crash(vstack("config"), ["ValueError: Invalid method eagle-3. Supported methods are eagle, eagle3, and dflash."], where="api")

    case("speculative-method", "V33", method, [finding("speculative-args", "error", "preflight")])

    def vocab(b):
        b.run_until("load")
        target_vocab_size, draft_vocab_size = 128256, 32000
        b.crash(vstack("config"), [f"ValueError: Target and draft model should have the same vocabulary size. Target model vocab_size={target_vocab_size}. Draft model vocab_size={draft_vocab_size}. Using models with different tokenizers can cause out-of-bounds errors during speculative decoding."], where="api")

    case("draft-model-vocab", "V10 V33", vocab, [finding("vocab-mismatch", "error", "preflight")], method="draft_model")

    def kv(b):
        b.run_until("kv")
        GiB = 1 << 30
        max_model_len, needed_memory, available_memory = 131072, 16.0 * GiB, 9.5 * GiB
        if b.d == "V10":
            estimated_msg = "Based on the available memory, the estimated maximum model length is 77824."
            msg = f"To serve at least one request with the models's max seq len ({max_model_len}), ({needed_memory/GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory ({available_memory/GiB:.2f} GiB). {estimated_msg} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        else:
            estimated_msg = "Based on the available memory, the estimated maximum model length is 77824. "
            msg = f"To serve at least one request with the model's max seq len ({max_model_len}), ({needed_memory/GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory ({available_memory/GiB:.2f} GiB). {estimated_msg}Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        b.crash(vstack("kv"), [f"ValueError: {msg}"], where="core")

    case("kv-cache-too-small", "V10 V33", kv, [finding("memory-budget", "error", "kv-alloc", [("clamp-max-model-len", ["--max-model-len 77824"])])])

    def weights_oom(b):
        b.run_until("load")
        b.workers("gpu_model_runner.py:2338", "Starting to load model %s..." % TARGET)
        b.crash(vstack("load"), [f"torch.OutOfMemoryError: Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using --quantization. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original error: {OOM})"])

    case("weights-oom", "V33", weights_oom, [finding("memory-budget", "error", "target-load")])

    def quant_key(b):
        b.run_until("load_draft")
        b.workers("gpu_model_runner.py:2370", "Loading drafter model...")
        b.crash(vstack("load_draft"), ["KeyError: 'layers.0.mlp.down_proj.weight'"])

    case("draft-inherits-quantization", "V10", quant_key, [finding("quantization-mismatch", "error", "drafter-load")])

    def heads(b):
        b.run_until("load")
        total_num_attention_heads, tensor_parallel_size = 28, 8
        b.crash(vstack("config")[:2] + [("vllm/config/parallel.py", 300, "verify_with_model_config", "raise ValueError(")], [f"ValueError: Total number of attention heads ({total_num_attention_heads}) must be divisible by tensor parallel size ({tensor_parallel_size})."], where="api")

    case("heads-tensor-parallel", "V10 V33", heads, [finding("tp-divisibility", "error", "preflight", [("tp-size-divisor", ["--tensor-parallel-size 7"])])])

    def bias(b):
        b.run_until("load_draft")
        b.workers("gpu_model_runner.py:2370", "Loading drafter model...")
        b.crash(vstack("load_draft"), ["ValueError: Found bias in the loaded weights but the model config doesn't have bias"])

    case("eagle1-fc-bias", "V10", bias, [finding("draft-architecture", "error", "drafter-load", [("draft-fc-bias", ["draft config /eagle_fc_bias = true (in memory)"])])], method="eagle")

    def unknown(b):
        b.run_until("kv")
        b.crash(
            vstack("kv")[:5] + [("vllm/v1/worker/gpu_worker.py", 250, "determine_available_memory", "self.model_runner.profile_run()"), ("vllm/distributed/device_communicators/pynccl.py", 100, "all_reduce", None)],
            ["RuntimeError: Triton Error [CUDA]: invalid argument"],
        )

    case("unrecognized-error", "V10 V33", unknown, [finding("unrecognized-failure", "error", "kv-alloc")])

    def success(b):
        b.run_until("end")
        b.metrics(3, 2.77)

    case("success", "V10 V33", success, [], final="ready")
    return cases


def messages():
    """Messages without a whole scenario, one per line: engine, the finding id a log of just
    this line gives ("-" for none), and the message as the engine formats it."""
    before_mem, after_mem, elapsed = 20.51, 19.02, 12.11
    sg = [
        ("-", "Mixed chunked prefill is disabled because of using eagle speculative decoding."),
        ("-", "DeepSeek MTP does not require setting speculative_draft_model_path."),
        ("-", "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"),
        ("-", "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. "),
        ("-", "Mixed chunked prefill is disabled: %s speculative decoding does not support it." % "EAGLE3"),
        ("-", "Load weight end. Committed real weights after CUDA graph capture in %.2f s " % 3.21),
        ("-", f"{'KV Cache'} {'VA upper bound'}. dtype: torch.bfloat16, #tokens: {411880}, K size: {25.14:.2f} GB, V size: {25.14:.2f} GB"),
        ("-", "Post-capture KV sizing: KV cache allocated. dtype: %s, #tokens: %d, KV size: %.2f GB, avail mem=%.2f GB" % ("torch.bfloat16", 411880, 50.28, 12.10)),
        ("-", f"Capture {'cpu graph'} begin. This can take up to several minutes. avail mem={before_mem:.2f} GB"),
        ("-", f"Capture piecewise CUDA graph begin. avail mem={before_mem:.2f} GB"),
        ("-", f"Capture piecewise CUDA graph end. Time elapsed: {elapsed:.2f} s. mem usage={before_mem - after_mem:.2f} GB. avail mem={after_mem:.2f} GB."),
        ("-", "Speculative token map specified, but EAGLE3 models already have this. Ignoring the specified token map."),
        ("-", f"Overriding draft attention backend to {'fa3'}."),
        ("-", "%s draft worker only supports attention_backend in %s for now, but got %r. Falling back to '%s'." % ("EAGLE3", ("flashinfer", "fa3", "triton"), "trtllm_mla", "flashinfer")),
        ("unrecognized-failure", "Initialization failed. Please see the error messages above."),
        ("unrecognized-failure", f"Scheduler or DataParallelController {4242} terminated with {-9}"),
        ("unrecognized-failure", "DataParallelController hit an exception: Traceback (most recent call last):"),
        ("speculative-args", "AssertionError: Chain speculative sampling supports only topk=1"),
        ("speculative-args", "ValueError: --speculative-use-rejection-sampling is incompatible with --speculative-accept-threshold-single / --speculative-accept-threshold-acc"),
        ("speculative-args", "AssertionError: PP is not compatible with MTP models."),
        ("draft-attention-backend", "ValueError: trtllm_mla backend can only be used with MLA models."),
        ("tp-divisibility", f"ValueError: tp_size {8} must be divisible by ep_size {3}"),
        ("tp-divisibility", f"ValueError: moe_intermediate_size {2048} must be divisible by moe_tp_size ({3}) which is tp_size ({6}) divided by moe_ep_size ({2})."),
        ("-", "    assert self.total_num_kv_heads % tp_size == 0"),
        ("-", "    assert tp_size % self.total_num_kv_heads == 0"),
        ("hidden-size-mismatch", "SGLANG_ENABLE_MTP_BOUNDARY_KV_FIX disabled: draft hidden size %d != target hidden size %d (the stash holds verify hiddens)." % (2048, 7168)),
        ("unsupported-architecture", f"ValueError: Model architectures {['LlamaForCausalLM']} failed to be inspected. Please check the logs for more details."),
        # Text every engine prints (torch, CUDA, NCCL, Python), read in an SGLang log.
        ("-", "Prefill batch, #new-seq: 1, #new-token: 48, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0"),
        ("cuda-graph-capture-failed", "Exception: Capture cuda graph failed: RuntimeError: bitmask must have the same batch size as logits"),
        ("nccl-error", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"),
        ("nccl-error", "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."),
        ("unrecognized-failure", "Fatal Python error: Segmentation fault"),
        ("unrecognized-failure", "RuntimeError: CUDA error: misaligned address"),
        ("out-of-memory", "RuntimeError: CUDA error: out of memory"),
    ]
    speculative_max_model_len, target_max_model_len, n_predict, vocab_size = 200000, 131072, 2, 128256
    vl = [
        ("-", "The EAGLE head's vocab embedding will be loaded separately from the target model."),
        ("-", "Target embedding dim (%d) differs from draft embedding dim (%d). Keeping separate embedding weights." % (4096, 2048)),
        ("-", "Overriding draft model max model len from %d to %d" % (2048, 131072)),
        ("context-length-exceeds-target", f"ValueError: {speculative_max_model_len=} cannot be larger than {target_max_model_len=}"),
        ("speculative-args", "NotImplementedError: EAGLE does not support TP > 1 yet"),
        ("speculative-args", "ValueError: 'tensor_parallel_size' is not a valid argument in the speculative_config. Please pass 'draft_tensor_parallel_size' instead."),
        ("speculative-args", "ValueError: A speculative model was provided, but `num_speculative_tokens` was not provided"),
        ("speculative-args", f"ValueError: Expected num_speculative_tokens to be greater than zero ({0})."),
        ("speculative-args", f"ValueError: num_speculative_tokens:{5} must be divisible by {n_predict=}"),
        ("speculative-args", "ValueError: num_speculative_tokens was provided but without speculative model."),
        ("speculative-args", "NotImplementedError: Unsupported speculative method: '%s'" % "medusa2"),
        ("vocab-mismatch", f"AssertionError: Expected logits to have shape (*, {vocab_size}), but got torch.Size([4, 32000])"),
        ("memory-budget", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."),
        ("-", "Available routes are:"),
        ("-", "Route: /v1/chat/completions, Methods: POST"),
    ]
    llamacpp = [("-", "main: server is listening on http://127.0.0.1:8080 - starting the main loop")]
    return [("sglang",) + m for m in sg] + [("vllm",) + m for m in vl] + [("llama.cpp",) + m for m in llamacpp]


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    manifest = []

    def write(dialect, name, tp, lines, findings, final):
        # Expectations that depend on the rank count are given as a function of it.
        findings = findings(tp) if callable(findings) else findings
        folder = os.path.join(ROOT, DIALECT_DIRS[dialect])
        os.makedirs(folder, exist_ok=True)
        fname = f"{name}.log" if tp == 1 else f"{name}.tp{tp}.log"
        with open(os.path.join(folder, fname), "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines) + "\n")
        manifest.append(
            {
                "log": f"{DIALECT_DIRS[dialect]}/{fname}",
                "case": name,
                "dialect": dialect,
                "tp": tp,
                "format": "vllm" if dialect.startswith("V") else "sglang",
                "version_guess": GUESS[dialect],
                "findings": findings,
                "final": final,
            }
        )

    seed = 0
    for name, dialects, build, findings, final, args in sglang_cases():
        for d in dialects:
            for tp in (1, 4):
                seed += 1
                extra = dict(args)
                draft_cls = extra.pop("draft_cls", None)
                b = Sglang(d, tp, seed, **extra)
                b.args["tp_size"] = args.get("tp_size", tp)
                b.draft_cls = draft_cls
                build(b)
                write(d, name, tp, b.lines, findings, final)
    for name, dialects, build, findings, final, args in vllm_cases():
        for d in dialects.split():
            for tp in (1, 4):
                seed += 1
                b = Vllm(d, tp, seed, method=args["method"])
                build(b)
                write(d, name, tp, b.lines, findings, final)
    with open(os.path.join(ROOT, "messages.txt"), "w", encoding="utf-8") as f:
        f.writelines(f"{engine}\t{expect}\t{message}\n" for engine, expect, message in messages())
    with open(os.path.join(ROOT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(manifest)} logs in {ROOT}")


if __name__ == "__main__":
    main()
