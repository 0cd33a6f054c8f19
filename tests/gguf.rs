//! GGUF reading, dequantization and `convert gguf`, on real files: reference fixtures written
//! by gguf-py (scripts/gen_gguf_fixtures.py) and small files written here.

mod gguf_support;

use std::path::{Path, PathBuf};

use gguf_support::{f32_bytes, permute_rows, q8_0, s, str_array, Writer};
use half::bf16;
use proptest::prelude::*;
use safetensors::Dtype;
use specdeck::model::checkpoint::Checkpoint;
use specdeck::model::config::ModelConfig;
use specdeck::model::convert::{convert_gguf, ConvertError, OutDtype};
use specdeck::model::gguf::{parse_header, GgmlType, GgufError, GgufFile, Value, ValueType};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/gguf").join(name)
}

fn convert(input: &Path, out: &Path, dtype: OutDtype) -> Result<(), ConvertError> {
    convert_gguf(input, out, dtype, &mut |_| {}).map(|_| ())
}

// ---- the reference fixtures (gguf-py) ----

#[test]
fn reference_metadata_of_every_value_type_reads_back() {
    let g = GgufFile::open(&fixture("quants.gguf")).unwrap();
    assert_eq!(g.header.version, 3);
    let want = [
        ("test.u8", Value::U8(200)),
        ("test.i8", Value::I8(-100)),
        ("test.u16", Value::U16(60000)),
        ("test.i16", Value::I16(-30000)),
        ("test.u32", Value::U32(4_000_000_000)),
        ("test.i32", Value::I32(-2_000_000_000)),
        ("test.f32", Value::F32(0.1)),
        ("test.bool", Value::Bool(true)),
        ("test.string", s("héllo ✓")),
        ("test.u64", Value::U64((1 << 63) + 5)),
        ("test.i64", Value::I64(-(1 << 62))),
        ("test.f64", Value::F64(1e-300)),
        ("test.array_i32", Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(-2), Value::I32(3)])),
        ("test.array_str", str_array(&["a", "", "ccc"])),
        (
            "test.array_nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(2)]),
                    Value::Array(ValueType::I32, vec![Value::I32(3), Value::I32(4), Value::I32(5)]),
                ],
            ),
        ),
    ];
    for (key, value) in want {
        assert_eq!(g.get(key), Some(&value), "{key}");
    }
    assert_eq!(g.require_str("general.architecture").unwrap(), "test");
    // Typed accessors: a wrong type is an error naming the key, not a silent None.
    let e = g.require_u64("test.string").unwrap_err().to_string();
    assert!(e.ends_with("metadata key \"test.string\" = \"héllo ✓\" is not a non-negative integer"), "{e}");
    let e = g.require_u64("test.absent").unwrap_err().to_string();
    assert!(e.contains("quants.gguf: metadata key \"test.absent\" is missing"), "{e}");
}

#[test]
fn every_supported_type_dequantizes_bit_exactly_like_gguf_py() {
    let g = GgufFile::open(&fixture("quants.gguf")).unwrap();
    let types = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K"];
    for ty in types {
        let q = g.tensor(&format!("q.{ty}")).unwrap();
        assert_eq!(q.ggml_type.name(), ty);
        assert_eq!(q.shape(), vec![2, 512]);
        let reference = g.dequantize(g.tensor(&format!("ref.{ty}")).unwrap()).unwrap();
        let ours = g.dequantize(q).unwrap();
        let mismatches = ours.iter().zip(&reference).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(mismatches, 0, "{ty}: {mismatches} of 1024 values differ from gguf.quants.dequantize");
        assert!(reference.iter().any(|v| *v != 0.0), "{ty}: the reference is all zeros");
    }
}

#[test]
fn tiny_llama_converts_to_the_expected_hf_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny");
    convert(&fixture("tiny-llama.gguf"), &out, OutDtype::Bf16).unwrap();

    let cfg = ModelConfig::load_dir(&out).unwrap();
    assert_eq!(cfg.architecture().unwrap().value, "LlamaForCausalLM");
    let sizes = [
        ("hidden_size", 64),
        ("intermediate_size", 96),
        ("num_hidden_layers", 2),
        ("num_attention_heads", 4),
        ("num_key_value_heads", 2),
        ("head_dim", 16),
        ("vocab_size", 331),
        ("max_position_embeddings", 256),
        ("bos_token_id", 1),
        ("eos_token_id", 2),
    ];
    for (key, want) in sizes {
        assert_eq!(cfg.require_u64(key).unwrap().value, want, "{key}");
    }
    assert_eq!(cfg.rms_norm_eps().unwrap(), 1e-5);
    assert_eq!(cfg.rope_theta().unwrap().unwrap().value, 1e5);
    assert!(cfg.tie_word_embeddings());
    assert_eq!(cfg.dtype().unwrap().value, "bfloat16");

    let expected = Checkpoint::open(&tempdir_with(&fixture("tiny-llama.expected.safetensors"))).unwrap();
    let ours = Checkpoint::open(&out).unwrap();
    assert_eq!(ours.tensors.keys().collect::<Vec<_>>(), expected.tensors.keys().collect::<Vec<_>>());
    assert!(!ours.contains("lm_head.weight"), "tied embeddings must not write lm_head");
    for (name, meta) in &expected.tensors {
        let got = ours.view(name).unwrap();
        assert_eq!((got.dtype, got.shape), (Dtype::BF16, meta.shape.as_slice()), "{name}");
        let want: Vec<bf16> = expected.f32(name, None).unwrap().into_iter().map(bf16::from_f32).collect();
        assert_eq!(got.to_bf16().unwrap(), want, "{name}");
    }

    // The f32 output is the dequantized values themselves, bit for bit.
    let out32 = dir.path().join("tiny32");
    convert(&fixture("tiny-llama.gguf"), &out32, OutDtype::F32).unwrap();
    let ours32 = Checkpoint::open(&out32).unwrap();
    for name in expected.tensors.keys() {
        let want = expected.f32(name, None).unwrap();
        let got = ours32.f32(name, None).unwrap();
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}");
    }
    assert_eq!(ModelConfig::load_dir(&out32).unwrap().dtype().unwrap().value, "float32");

    assert_token_ids(&out, "smollm");
    // SmolLM2's tokenizer has no normalizer: a decomposed é stays two characters.
    let tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    let ids = |text: &str| tok.encode(text, false).unwrap().get_ids().to_vec();
    assert_ne!(ids("cafe\u{301}"), ids("caf\u{e9}"));
    let tc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("tokenizer_config.json")).unwrap()).unwrap();
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert!(tc["chat_template"].as_str().unwrap().starts_with("{% for m in messages %}<|im_start|>"));
    let gc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("generation_config.json")).unwrap()).unwrap();
    assert_eq!(gc, serde_json::json!({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}));
}

/// A folder holding a copy of one safetensors file (Checkpoint opens folders).
fn tempdir_with(file: &Path) -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    std::fs::copy(file, dir.join("model.safetensors")).unwrap();
    dir
}

/// tokenizer.json encodes the fixture strings to the ids gguf-py + Appendix B produced.
fn assert_token_ids(folder: &Path, pre: &str) {
    let tok = tokenizers::Tokenizer::from_file(folder.join("tokenizer.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture("tiny-llama.expected.json")).unwrap()).unwrap();
    let cases = expected["encodings"][pre].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let got = tok.encode(text, false).unwrap();
        assert_eq!(got.get_ids(), want.as_slice(), "{pre}: {text:?}");
        assert_eq!(tok.decode(&want, false).unwrap(), text, "{pre}: decode");
    }
}

// ---- small models written here ----

/// The fixture's tokenizer metadata, to give the models written here a real vocabulary.
fn fixture_tokenizer_kv(pre: &str) -> Vec<(String, Value)> {
    let g = GgufFile::open(&fixture("tiny-llama.gguf")).unwrap();
    let mut kv: Vec<(String, Value)> =
        ["tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"]
            .iter()
            .map(|k| (k.to_string(), g.get(k).unwrap().clone()))
            .collect();
    kv.push(("tokenizer.ggml.pre".into(), s(pre)));
    kv.push(("tokenizer.ggml.eos_token_id".into(), Value::U32(2)));
    kv
}

const VOCAB: u64 = 331;
const HIDDEN: u64 = 32;
const HEADS: u64 = 2;
const HEAD_DIM: u64 = 16;
const FFN: u64 = 32;

fn labelled(rows: u64, cols: u64, tag: f32) -> Vec<f32> {
    (0..rows * cols).map(|i| tag + (i / cols) as f32 + (i % cols) as f32 / 64.0).collect()
}

/// One-layer model, heads 2 / kv heads 1 / head_dim 16. `q_rows` are the q_proj rows as
/// stored in the file (Q8_0); everything else is F32 with labelled values.
fn one_layer(arch: &str, q_stored: &[f32], output: bool, bias: bool) -> Writer {
    let kv_rows = HEAD_DIM; // one kv head
    let mut w = Writer::default()
        .kv("general.architecture", s(arch))
        .kv(&format!("{arch}.block_count"), Value::U32(1))
        .kv(&format!("{arch}.context_length"), Value::U32(128))
        .kv(&format!("{arch}.embedding_length"), Value::U32(HIDDEN as u32))
        .kv(&format!("{arch}.feed_forward_length"), Value::U32(FFN as u32))
        .kv(&format!("{arch}.attention.head_count"), Value::U32(HEADS as u32))
        .kv(&format!("{arch}.attention.head_count_kv"), Value::U32(1))
        .kv(&format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        .kv(&format!("{arch}.rope.freq_base"), Value::F32(1e6));
    w.kv.extend(fixture_tokenizer_kv(if arch == "qwen2" { "qwen2" } else { "smollm" }));
    w = w
        .f32_tensor("token_embd.weight", &[VOCAB, HIDDEN], &labelled(VOCAB, HIDDEN, 0.0))
        .f32_tensor("output_norm.weight", &[HIDDEN], &labelled(1, HIDDEN, 0.5))
        .f32_tensor("blk.0.attn_norm.weight", &[HIDDEN], &labelled(1, HIDDEN, 1.0))
        .f32_tensor("blk.0.ffn_norm.weight", &[HIDDEN], &labelled(1, HIDDEN, 2.0))
        .tensor("blk.0.attn_q.weight", &[HEADS * HEAD_DIM, HIDDEN], GgmlType::Q8_0, q8_0(q_stored, 0.5))
        .f32_tensor("blk.0.attn_k.weight", &[kv_rows, HIDDEN], &labelled(kv_rows, HIDDEN, 3000.0))
        .f32_tensor("blk.0.attn_v.weight", &[kv_rows, HIDDEN], &labelled(kv_rows, HIDDEN, 4000.0))
        .f32_tensor("blk.0.attn_output.weight", &[HIDDEN, HEADS * HEAD_DIM], &labelled(HIDDEN, HIDDEN, 5000.0))
        .f32_tensor("blk.0.ffn_gate.weight", &[FFN, HIDDEN], &labelled(FFN, HIDDEN, 6000.0))
        .f32_tensor("blk.0.ffn_up.weight", &[FFN, HIDDEN], &labelled(FFN, HIDDEN, 7000.0))
        .f32_tensor("blk.0.ffn_down.weight", &[HIDDEN, FFN], &labelled(HIDDEN, FFN, 8000.0));
    if bias {
        w = w
            .f32_tensor("blk.0.attn_q.bias", &[HEADS * HEAD_DIM], &labelled(HEADS * HEAD_DIM, 1, 100.0))
            .f32_tensor("blk.0.attn_k.bias", &[kv_rows], &labelled(kv_rows, 1, 200.0))
            .f32_tensor("blk.0.attn_v.bias", &[kv_rows], &labelled(kv_rows, 1, 300.0));
    }
    if output {
        w = w.f32_tensor("output.weight", &[VOCAB, HIDDEN], &labelled(VOCAB, HIDDEN, 9000.0));
    }
    w
}

/// q_proj in HF order: row r holds (r - 16) * 0.5 + col-dependent multiples of 0.5, all
/// exact in Q8_0 with scale 0.5.
fn q_hf() -> Vec<f32> {
    (0..HEADS * HEAD_DIM * HIDDEN).map(|i| ((i / HIDDEN) as f32 - 16.0) * 0.5 + (i % 4) as f32 * 0.5).collect()
}

#[test]
fn llama_qk_rows_are_put_back_in_hf_order() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("llama.gguf");
    let hf = q_hf();
    one_layer("llama", &permute_rows(&hf, HIDDEN as usize, HEADS as usize), false, false).write(&gguf);
    let out = dir.path().join("out");
    convert(&gguf, &out, OutDtype::F32).unwrap();
    let ck = Checkpoint::open(&out).unwrap();
    assert_eq!(ck.f32("model.layers.0.self_attn.q_proj.weight", Some(&[32, 32])).unwrap(), hf);
    // k_proj has one kv head: its 16 rows were permuted within that head.
    let k_stored = labelled(HEAD_DIM, HIDDEN, 3000.0);
    let k = ck.f32("model.layers.0.self_attn.k_proj.weight", Some(&[16, 32])).unwrap();
    assert_eq!(permute_rows(&k, HIDDEN as usize, 1), k_stored);
    assert_ne!(k, k_stored);
    // v_proj is never permuted.
    assert_eq!(ck.f32("model.layers.0.self_attn.v_proj.weight", None).unwrap(), labelled(HEAD_DIM, HIDDEN, 4000.0));
}

#[test]
fn qwen2_keeps_row_order_and_writes_biases_and_lm_head() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("qwen.gguf");
    let hf = q_hf();
    one_layer("qwen2", &hf, true, true).write(&gguf);
    let out = dir.path().join("out");
    convert(&gguf, &out, OutDtype::F32).unwrap();
    let cfg = ModelConfig::load_dir(&out).unwrap();
    assert_eq!(cfg.architecture().unwrap().value, "Qwen2ForCausalLM");
    assert_eq!(cfg.model_type().unwrap().value, "qwen2");
    assert!(!cfg.tie_word_embeddings());
    assert_eq!(cfg.rms_norm_eps().unwrap(), 1e-6);
    assert_eq!(cfg.num_key_value_heads().unwrap().unwrap().value, 1);
    let ck = Checkpoint::open(&out).unwrap();
    assert_eq!(ck.f32("model.layers.0.self_attn.q_proj.weight", None).unwrap(), hf);
    assert_eq!(ck.f32("model.layers.0.self_attn.q_proj.bias", Some(&[32])).unwrap(), labelled(32, 1, 100.0));
    assert_eq!(ck.f32("model.layers.0.self_attn.k_proj.bias", Some(&[16])).unwrap(), labelled(16, 1, 200.0));
    assert_eq!(ck.f32("lm_head.weight", Some(&[331, 32])).unwrap(), labelled(VOCAB, HIDDEN, 9000.0));
    assert_eq!(ck.f32("model.layers.0.mlp.down_proj.weight", Some(&[32, 32])).unwrap(), labelled(HIDDEN, FFN, 8000.0));
    assert_eq!(ck.tensors.len(), 15); // 3 global + 12 per layer (with 3 biases)
    assert_token_ids(&out, "qwen2");
    // Qwen2's HF tokenizer normalizes to NFC: a decomposed é encodes like the composed one.
    let tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    let ids = |text: &str| tok.encode(text, false).unwrap().get_ids().to_vec();
    assert_eq!(ids("cafe\u{301}"), ids("caf\u{e9}"));
}

// ---- bad input: clear errors naming the file and the key or tensor, never a panic ----

fn small_valid() -> Writer {
    Writer::default().kv("general.architecture", s("llama")).kv("general.name", s("x")).f32_tensor("a", &[2, 4], &[1.0; 8]).tensor(
        "blk.0.attn_q.weight",
        &[1, 32],
        GgmlType::Q8_0,
        q8_0(&[0.5; 32], 0.5),
    )
}

fn parse(bytes: &[u8]) -> Result<specdeck::model::gguf::Header, GgufError> {
    parse_header(Path::new("/m/bad.gguf"), bytes)
}

#[test]
fn bad_magic_and_versions_are_named() {
    let mut bytes = small_valid().to_bytes();
    bytes[..4].copy_from_slice(b"GGML");
    assert_eq!(parse(&bytes).unwrap_err().to_string(), "/m/bad.gguf: not a GGUF file (starts with \"GGML\", expected \"GGUF\")");
    let mut v1 = small_valid();
    v1.version = 1;
    assert_eq!(parse(&v1.to_bytes()).unwrap_err().to_string(), "/m/bad.gguf: GGUF version 1 is not supported (2 and 3 are)");
    let mut be = small_valid().to_bytes();
    be[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(parse(&be).unwrap_err().to_string().ends_with("(2 and 3 are; this looks like a big-endian file)"));
    let mut v2 = small_valid();
    v2.version = 2;
    assert_eq!(parse(&v2.to_bytes()).unwrap().version, 2);
}

#[test]
fn every_truncation_is_an_error_naming_what_was_cut() {
    let bytes = small_valid().to_bytes();
    for len in 0..bytes.len() {
        let e = parse(&bytes[..len]).unwrap_err().to_string();
        assert!(e.starts_with("/m/bad.gguf: "), "cut at {len}: {e}");
    }
    // Cut inside the last tensor's data: the tensor is named.
    let e = parse(&bytes[..bytes.len() - 3]).unwrap_err().to_string();
    assert!(e.contains("truncated: tensor \"blk.0.attn_q.weight\" data (Q8_0 34 bytes) needs 34 bytes at offset"), "{e}");
    // Cut inside a metadata string: the key is named.
    let cut = 24 + 8 + "general.architecture".len() + 4 + 8 + 2;
    let e = parse(&bytes[..cut]).unwrap_err().to_string();
    assert!(e.contains("truncated: metadata key \"general.architecture\" needs 5 bytes"), "{e}");
    // A file on disk is named by its path.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cut.gguf");
    std::fs::write(&p, &bytes[..40]).unwrap();
    let e = GgufFile::open(&p).err().unwrap().to_string();
    assert!(e.starts_with(&format!("{}: truncated", p.display())), "{e}");
}

#[test]
fn absurd_counts_fail_before_allocating() {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(u64::MAX.to_le_bytes()); // tensor count
    bytes.extend(0u64.to_le_bytes());
    let e = parse(&bytes).unwrap_err().to_string();
    assert!(e.contains("truncated: the tensor count (18446744073709551615 items)"), "{e}");
    let huge_string = Writer::default().kv("k", s("v")).to_bytes();
    let mut bytes = huge_string.clone();
    let len_at = 24 + 8 + 1 + 4; // the value's length prefix
    bytes[len_at..len_at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let e = parse(&bytes).unwrap_err().to_string();
    assert!(e.contains("metadata key \"k\""), "{e}");
}

#[test]
fn unknown_quant_type_names_the_tensor() {
    let mut w = small_valid();
    w.tensors[1].type_id = 99;
    let e = parse(&w.to_bytes()).unwrap_err().to_string();
    assert_eq!(e, "/m/bad.gguf: tensor \"blk.0.attn_q.weight\" has unknown ggml type 99");
}

#[test]
fn structural_errors_name_the_tensor_or_key() {
    let mut w = small_valid();
    w.tensors[1].shape = vec![1, 31]; // not a whole Q8_0 block
    let e = parse(&w.to_bytes()).unwrap_err().to_string();
    assert!(e.contains("tensor \"blk.0.attn_q.weight\": row length 31 is not a multiple of Q8_0's block of 32"), "{e}");
    let dup = small_valid().kv("general.name", s("again"));
    assert!(parse(&dup.to_bytes()).unwrap_err().to_string().contains("metadata key \"general.name\": the key appears twice"));
    let bad_align = small_valid().kv("general.alignment", Value::U32(24));
    assert!(parse(&bad_align.to_bytes()).unwrap_err().to_string().contains("\"general.alignment\": 24 is not a power-of-two u32"));
    let mut bad_bool = small_valid().kv("flag", Value::Bool(true)).to_bytes();
    let at = bad_bool.windows(4).position(|w| w == b"flag").unwrap() + 4 + 4;
    bad_bool[at] = 7;
    assert!(parse(&bad_bool).unwrap_err().to_string().contains("metadata key \"flag\": bool byte is 7, not 0 or 1"));
}

#[test]
fn the_alignment_key_is_honoured() {
    let mut w = small_valid().kv("general.alignment", Value::U32(64));
    w.alignment = 64;
    let h = parse(&w.to_bytes()).unwrap();
    assert_eq!((h.alignment, h.data_start % 64), (64, 0));
    assert_eq!(h.tensors[1].offset, 64);
}

fn convert_err(w: &Writer) -> String {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("m.gguf");
    w.write(&gguf);
    let out = dir.path().join("out");
    let e = convert(&gguf, &out, OutDtype::Bf16).unwrap_err().to_string();
    assert!(!out.exists(), "a failed conversion left {}", out.display());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("m.gguf")], "leftovers beside the output");
    e.replace(&gguf.display().to_string(), "m.gguf")
}

#[test]
fn conversion_errors_name_the_tensor_or_key() {
    let base = || one_layer("llama", &q_hf(), false, false);
    let mut unsupported = base();
    unsupported.tensors[5] = gguf_support::Tensor {
        name: "blk.0.attn_k.weight".into(),
        shape: vec![16, 32],
        type_id: GgmlType::Q5_1.id(),
        data: vec![0; 16 * 24],
    };
    assert_eq!(convert_err(&unsupported), "m.gguf: tensor \"blk.0.attn_k.weight\" type Q5_1 cannot be dequantized");

    let mut missing = base();
    missing.tensors.retain(|t| t.name != "blk.0.ffn_up.weight");
    assert_eq!(convert_err(&missing), "m.gguf: tensor \"blk.0.ffn_up.weight\" is missing");

    let mut misshapen = base();
    misshapen.tensors[6].shape = vec![32, 16];
    misshapen.tensors[6].data = f32_bytes(&[0.0; 512]);
    assert_eq!(
        convert_err(&misshapen),
        "m.gguf: tensor \"blk.0.attn_v.weight\" has shape [32, 16], but the metadata sizes give [16, 32] for model.layers.0.self_attn.v_proj.weight"
    );

    let mut gemma = base();
    gemma.kv[0].1 = s("gemma3");
    assert_eq!(convert_err(&gemma), "m.gguf: general.architecture = gemma3: only llama and qwen2 models can be converted");

    let stray = base().f32_tensor("rope_freqs.weight", &[8], &[1.0; 8]);
    assert_eq!(convert_err(&stray), "m.gguf: tensor \"rope_freqs.weight\" has no HF equivalent for this converter");

    let no_eps = {
        let mut w = base();
        w.kv.retain(|(k, _)| k != "llama.attention.layer_norm_rms_epsilon");
        w
    };
    assert_eq!(convert_err(&no_eps), "m.gguf: metadata key \"llama.attention.layer_norm_rms_epsilon\" is missing");

    let odd_heads = base().kv("llama.attention.key_length", Value::U32(15));
    assert_eq!(convert_err(&odd_heads), "m.gguf: llama.embedding_length = 32 over 2 heads (head_dim 15): a llama head_dim must be even");

    let mut spm = base();
    let model = spm.kv.iter_mut().find(|(k, _)| k == "tokenizer.ggml.model").unwrap();
    model.1 = s("llama");
    assert_eq!(convert_err(&spm), "m.gguf: tokenizer.ggml.model = llama: only byte-level BPE (gpt2) vocabularies are converted");
}

#[test]
fn convert_never_writes_into_an_existing_folder_and_never_touches_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("m.gguf");
    one_layer("llama", &q_hf(), false, false).write(&gguf);
    let before = std::fs::read(&gguf).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let e = convert(&gguf, &out, OutDtype::Bf16).unwrap_err().to_string();
    assert!(e.ends_with("out: already exists and is not an empty folder; convert into a new folder"), "{e}");
    assert_eq!(std::fs::read_to_string(out.join("keep.txt")).unwrap(), "mine");
    // An empty folder is fine, and is replaced by the finished one.
    std::fs::remove_file(out.join("keep.txt")).unwrap();
    convert(&gguf, &out, OutDtype::Bf16).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
    assert_eq!(std::fs::read(&gguf).unwrap(), before);
}

#[test]
fn the_cli_converts_with_progress_and_fails_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_specdeck"))
        .args(["convert", "gguf"])
        .arg(fixture("tiny-llama.gguf"))
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("convert: 100%  20/20 tensors"), "{stderr}");
    assert!(stderr.contains("(Llama, 2 layers, hidden 64, vocab 331, 20 tensors"), "{stderr}");
    assert!(out.join("model.safetensors").is_file());

    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x03\0\0\0").unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_specdeck"))
        .args(["convert", "gguf"])
        .arg(&bad)
        .arg(dir.path().join("never"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("specdeck: {}: truncated: the tensor count needs 8 bytes at offset 8", bad.display())), "{stderr}");
    assert!(!dir.path().join("never").exists());
}

// ---- never a panic ----

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&bytes);
        let mut with_magic = b"GGUF\x03\0\0\0".to_vec();
        with_magic.extend(&bytes);
        let _ = parse(&with_magic);
    }

    #[test]
    fn corrupted_valid_files_never_panic(
        cut in 0usize..400,
        flips in proptest::collection::vec((0usize..400, any::<u8>()), 0..6),
    ) {
        let mut bytes = small_valid().to_bytes();
        for (at, b) in flips {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        bytes.truncate(bytes.len().saturating_sub(cut % 8));
        if let Ok(h) = parse(&bytes) {
            // Whatever parses must also dequantize without panicking.
            for t in &h.tensors {
                let start = (h.data_start + t.offset) as usize;
                let data = &bytes[start..start + t.n_bytes as usize];
                let mut out = vec![0.0f32; t.n_elements as usize];
                let _ = specdeck::model::gguf::dequantize(t.ggml_type, data, &mut out);
            }
        }
    }
}
