//! ggml tensor types: ids, names and block geometry (ggml.h's `type_traits`).
//!
//! Every type a GGUF file may carry is listed, even those we cannot dequantize, so that a
//! reader can still lay out and bounds-check every tensor and name an unsupported one.

/// A ggml tensor type, by its on-disk id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    Bf16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
}

/// (type, id, name, elements per block, bytes per block)
const TABLE: [(GgmlType, u32, &str, u64, u64); 32] = [
    (GgmlType::F32, 0, "F32", 1, 4),
    (GgmlType::F16, 1, "F16", 1, 2),
    (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
    (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
    (GgmlType::Q5_0, 6, "Q5_0", 32, 22),
    (GgmlType::Q5_1, 7, "Q5_1", 32, 24),
    (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
    (GgmlType::Q8_1, 9, "Q8_1", 32, 36),
    (GgmlType::Q2K, 10, "Q2_K", 256, 84),
    (GgmlType::Q3K, 11, "Q3_K", 256, 110),
    (GgmlType::Q4K, 12, "Q4_K", 256, 144),
    (GgmlType::Q5K, 13, "Q5_K", 256, 176),
    (GgmlType::Q6K, 14, "Q6_K", 256, 210),
    (GgmlType::Q8K, 15, "Q8_K", 256, 292),
    (GgmlType::Iq2Xxs, 16, "IQ2_XXS", 256, 66),
    (GgmlType::Iq2Xs, 17, "IQ2_XS", 256, 74),
    (GgmlType::Iq3Xxs, 18, "IQ3_XXS", 256, 98),
    (GgmlType::Iq1S, 19, "IQ1_S", 256, 50),
    (GgmlType::Iq4Nl, 20, "IQ4_NL", 32, 18),
    (GgmlType::Iq3S, 21, "IQ3_S", 256, 110),
    (GgmlType::Iq2S, 22, "IQ2_S", 256, 82),
    (GgmlType::Iq4Xs, 23, "IQ4_XS", 256, 136),
    (GgmlType::I8, 24, "I8", 1, 1),
    (GgmlType::I16, 25, "I16", 1, 2),
    (GgmlType::I32, 26, "I32", 1, 4),
    (GgmlType::I64, 27, "I64", 1, 8),
    (GgmlType::F64, 28, "F64", 1, 8),
    (GgmlType::Iq1M, 29, "IQ1_M", 256, 56),
    (GgmlType::Bf16, 30, "BF16", 1, 2),
    (GgmlType::Tq1_0, 34, "TQ1_0", 256, 54),
    (GgmlType::Tq2_0, 35, "TQ2_0", 256, 66),
    (GgmlType::Mxfp4, 39, "MXFP4", 32, 17),
];

impl GgmlType {
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|row| row.1 == id).map(|row| row.0)
    }

    fn row(self) -> &'static (GgmlType, u32, &'static str, u64, u64) {
        TABLE.iter().find(|row| row.0 == self).expect("every variant has a table row")
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    /// llama.cpp's name for the type (`Q4_K`, `BF16`, ...).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Elements per block (1 for plain types).
    pub fn block_elems(self) -> u64 {
        self.row().3
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        self.row().4
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_gaps_are_unknown() {
        for (ty, id, ..) in TABLE {
            assert_eq!(GgmlType::from_id(id), Some(ty));
            assert_eq!(ty.id(), id);
        }
        // 4 and 5 (Q4_2, Q4_3) and 31..33 were removed from ggml; their ids stay unknown.
        for gap in [4, 5, 31, 32, 33, 36, 99] {
            assert_eq!(GgmlType::from_id(gap), None, "id {gap}");
        }
        assert_eq!((GgmlType::Q6K.name(), GgmlType::Q6K.block_elems(), GgmlType::Q6K.block_bytes()), ("Q6_K", 256, 210));
    }
}
