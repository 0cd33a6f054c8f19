//! Rule tests over configs held in memory: no model folder on disk, the GPU inventory given.

use serde_json::Value;

use crate::finding::{Finding, Side};
use crate::model::config::ModelConfig;
use crate::preflight::gpu::GpuInventory;
use crate::preflight::inputs::{Draft, InputError, Inputs, ModelFiles};
use crate::preflight::{RuleContext, RuleResult};
use crate::spec::LaunchSpec;

/// A target config and maybe a drafter's, shown as `target/config.json` and
/// `draft/config.json` (the drafter's in-memory overrides are not applied).
pub struct Configs {
    inputs: Inputs,
}

fn files(side: Side, dir: &str, config: Value) -> ModelFiles {
    let config = ModelConfig::from_value(format!("{dir}/config.json"), config);
    ModelFiles { side, dir: dir.into(), config, checkpoint: None, tokenizer: Default::default() }
}

impl Configs {
    pub fn new(target: Value, draft: Option<Value>) -> Configs {
        let draft = draft.map(|config| {
            let files = files(Side::Draft, "draft", config);
            Draft { effective: files.config.clone(), files }
        });
        Configs { inputs: Inputs { target: files(Side::Target, "target", target), draft } }
    }

    /// `rule`'s findings for `spec` on a machine of `gpus`.
    pub fn check(&self, rule: fn(&RuleContext) -> RuleResult, spec: &LaunchSpec, gpus: &GpuInventory) -> Result<Vec<Finding>, InputError> {
        rule(&RuleContext::new(spec, &self.inputs, gpus)?)
    }
}

/// A config.json of the repository's test data, by its folder under the crate root.
pub fn testdata(folder: &str) -> Value {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder).join("config.json");
    serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()
}

/// `count` GPUs of 80 GiB.
pub fn gpus(count: u32) -> GpuInventory {
    GpuInventory { count: Some(count), memory_bytes: Some(80 << 30), source: format!("{count} test GPUs") }
}

/// `spec` with the remedy `id` of `finding` applied.
pub fn applied(spec: &LaunchSpec, finding: &Finding, id: &str) -> LaunchSpec {
    let remedy = finding.remedy(id).unwrap_or_else(|| panic!("no remedy {id} in {finding:?}"));
    let mut out = spec.clone();
    out.apply_remedy(id, &remedy.changes).unwrap();
    out
}
