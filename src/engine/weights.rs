//! Loading named checkpoint tensors onto a backend, with shape checks and byte progress per file.

use crate::backend::{Backend, BackendError, Shard};
use crate::model::checkpoint::{Checkpoint, CheckpointError};
use crate::model::quantized::{Fp8Linear, Int4Linear, WeightFormats};

/// Bytes of one checkpoint file read so far.
#[derive(Clone, Debug, PartialEq)]
pub struct FileProgress {
    /// The file name (no folder).
    pub file: String,
    pub done: u64,
    pub total: u64,
}

pub struct Loader<'a, B: Backend> {
    backend: &'a B,
    ck: &'a Checkpoint,
    done: Vec<u64>,
    progress: &'a mut dyn FnMut(FileProgress),
}

impl<'a, B: Backend> Loader<'a, B> {
    pub fn new(backend: &'a B, ck: &'a Checkpoint, progress: &'a mut dyn FnMut(FileProgress)) -> Self {
        Loader { backend, ck, done: vec![0; ck.files.len()], progress }
    }

    pub fn has(&self, name: &str) -> bool {
        self.ck.contains(name)
    }

    /// A tensor with its shape checked (the error names the file and the tensor).
    pub fn weight(&mut self, name: &str, shape: &[usize], shard: Shard) -> Result<B::Weight, BackendError> {
        let view = self.ck.view(name)?;
        view.expect_shape(shape)?;
        let w = self.backend.load_weight(&view, shard)?;
        self.advance(name);
        Ok(w)
    }

    /// Tensors that multiply the same input, shapes checked, loaded together
    /// (`Backend::load_stacked`): `N` names and shapes, `N` weights in their order.
    pub fn stacked<const N: usize>(&mut self, tensors: [(&str, &[usize]); N], shard: Shard) -> Result<[B::Weight; N], BackendError> {
        let mut views = Vec::with_capacity(N);
        for (name, shape) in tensors {
            let view = self.ck.view(name)?;
            view.expect_shape(shape)?;
            views.push(view);
        }
        let loaded = self.backend.load_stacked(&views, shard)?;
        drop(views);
        for (name, _) in tensors {
            self.advance(name);
        }
        loaded.try_into().map_err(|_| BackendError::Device(format!("load_stacked returned a count other than {N}")))
    }

    pub fn optional(&mut self, name: &str, shape: &[usize], shard: Shard) -> Result<Option<B::Weight>, BackendError> {
        if self.has(name) {
            self.weight(name, shape, shard).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Refuse a config's layer count that the checkpoint's tensors cannot back, before any
    /// allocation it would size.
    pub fn check_layers(&self, prefix: &str, key: &str, layers: usize) -> Result<(), BackendError> {
        Ok(self.ck.check_layers(prefix, key, layers as u64)?)
    }

    /// A tensor as f32 values on the host, its shape checked (the DeepSeek-V3 reference
    /// computes on the host: src/engine/deepseek/).
    pub fn host_f32(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, BackendError> {
        let view = self.ck.view(name)?;
        view.expect_shape(shape)?;
        let v = view.to_f32()?;
        self.advance(name);
        Ok(v)
    }

    /// A linear layer's `[rows, cols]` weight as f32 values on the host, however `formats`
    /// stores it (`model::quantized`); `name` ends in `.weight`.
    pub fn host_linear(&mut self, name: &str, rows: usize, cols: usize, formats: &WeightFormats) -> Result<Vec<f32>, BackendError> {
        let base = name.strip_suffix(".weight").unwrap_or(name);
        let (w, read) = self.ck.linear_f32(base, rows, cols, formats)?;
        for tensor in &read {
            self.advance(tensor);
        }
        Ok(w)
    }

    /// A linear layer's `[rows, cols]` weight as its FP8 bytes and block scales, when the
    /// checkpoint stores it so (`None` otherwise: read it with `host_linear`).
    pub fn host_fp8(&mut self, name: &str, [rows, cols]: [usize; 2], f: &WeightFormats) -> Result<Option<Fp8Linear<'a>>, BackendError> {
        self.host_as_stored(name, |ck, base| ck.linear_fp8(base, rows, cols, f))
    }

    /// A linear layer's `[rows, cols]` weight as its packed INT4 values and group scales, when
    /// the checkpoint stores it so (`None` otherwise: read it with `host_linear`).
    pub fn host_int4(&mut self, name: &str, [rows, cols]: [usize; 2], f: &WeightFormats) -> Result<Option<Int4Linear<'a>>, BackendError> {
        self.host_as_stored(name, |ck, base| ck.linear_int4(base, rows, cols, f))
    }

    /// What `read` finds of the linear layer `name` (its `.weight` suffix dropped), its
    /// tensors counted as read.
    fn host_as_stored<T>(
        &mut self,
        name: &str,
        read: impl FnOnce(&'a Checkpoint, &str) -> Result<Option<(T, Vec<String>)>, CheckpointError>,
    ) -> Result<Option<T>, BackendError> {
        let base = name.strip_suffix(".weight").unwrap_or(name);
        let Some((w, tensors)) = read(self.ck, base)? else { return Ok(None) };
        for tensor in &tensors {
            self.advance(tensor);
        }
        Ok(Some(w))
    }

    /// An integer tensor of `len` entries, read to the host (EAGLE-3's `d2t`).
    pub fn host_i64(&mut self, name: &str, len: usize) -> Result<Vec<i64>, BackendError> {
        let view = self.ck.view(name)?;
        view.expect_shape(&[len])?;
        let v = view.to_i64()?;
        self.advance(name);
        Ok(v)
    }

    /// The path of the file holding `name` (for error messages).
    pub fn file_of(&self, name: &str) -> String {
        self.ck.file_of(name).map(|p| p.display().to_string()).unwrap_or_else(|| self.ck.dir.display().to_string())
    }

    fn advance(&mut self, name: &str) {
        let Some(meta) = self.ck.meta(name) else { return };
        let i = meta.file_index;
        self.done[i] += (meta.end - meta.start) as u64;
        self.report(i);
    }

    fn report(&mut self, i: usize) {
        let f = &self.ck.files[i];
        let file = f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        (self.progress)(FileProgress { file, done: self.done[i].min(f.len), total: f.len });
    }

    /// Mark every file fully read (headers and unused tensors count too).
    pub fn finish(mut self) {
        for i in 0..self.ck.files.len() {
            self.done[i] = self.ck.files[i].len;
            self.report(i);
        }
    }
}

/// The checkpoint file and tensor an error is about, when it names one.
pub fn error_location(e: &BackendError) -> Option<(String, String)> {
    match e {
        BackendError::Load(CheckpointError::MissingTensor { dir, name } | CheckpointError::ExceedsCheckpoint { dir, key: name, .. }) => {
            Some((dir.display().to_string(), name.clone()))
        }
        BackendError::Load(CheckpointError::WrongShape { file, name, .. })
        | BackendError::Load(CheckpointError::WrongDtype { file, name, .. })
        | BackendError::Load(CheckpointError::BadValues { file, name, .. }) => Some((file.display().to_string(), name.clone())),
        _ => None,
    }
}
