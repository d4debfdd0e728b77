//! The convolution solvers of MIOpen's solver registry (`src/solver.cpp SolverRegistrar`): the
//! numeric id, the `SolverDbId` string that names a solver in the perf db, the find db, fin's
//! `solver_name` and `MIOPEN_DEBUG_FIND_ONLY_SOLVER`, and whether it is tunable (has a
//! `PerformanceConfig`, so it can have a perf-db entry) and dynamic (no compile per problem).
//!
//! Source: `docs/miopen-formats.md` §7. The 104 entries with `verified: true` are
//! MIOpen 3.3 (ROCm 6.3, `2d1fd997`): ids re-derived from the registrar and every id, name and
//! flag checked against `test/gtest/unit_FinInterface.cpp`. The entries with `verified: false`
//! are the solvers the newest MIOpen (`rocm-libraries`) registers under a new name on an old id
//! (8, 24) or on a new id (180, 185–217): their names come from applying MIOpen's naming rule
//! (`,` → `-`, spaces removed) to the registered class name, and their tunable/dynamic flags
//! are copied from the solver each one mirrors (the non-transposed original; `ConvOclDirectFwd`
//! for `ConvHipDirectFwd`). Neither was checked against a build (§10): treat them as hints.
//! Ids are stable across versions and never reused; removed solvers keep their id reserved, so
//! ids 8 and 24 appear twice (old name verified, new name not). Fusion, batch-norm and other
//! non-convolution registry entries are not listed (fin skips them for convolution tuning).

/// The `miopenConvAlgorithm_t` a solver belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    Gemm,
    Direct,
    Fft,
    ImplicitGemm,
    Winograd,
}

impl Algo {
    /// The directional algorithm name of find-db records and fin's `algorithm`
    /// (`ConvolutionAlgoToDirectionalString`), e.g. `miopenConvolutionFwdAlgoImplicitGEMM`.
    pub fn directional_name(self, direction: crate::Direction) -> String {
        let dir = match direction {
            crate::Direction::Forward => "Fwd",
            crate::Direction::BackwardData => "BwdData",
            crate::Direction::BackwardWeights => "BwdWeights",
        };
        let algo = match self {
            Algo::Gemm => "GEMM",
            Algo::Direct => "Direct",
            Algo::Fft => "FFT",
            Algo::ImplicitGemm => "ImplicitGEMM",
            Algo::Winograd => "Winograd",
        };
        format!("miopenConvolution{dir}Algo{algo}")
    }
}

/// One convolution solver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SolverInfo {
    pub id: u32,
    /// The `SolverDbId`, e.g. `ConvBinWinogradRxSf2x3`, `ConvOclBwdWrW2<4>`.
    pub name: &'static str,
    pub tunable: bool,
    pub dynamic: bool,
    pub algo: Algo,
    /// Checked against MIOpen 3.3 (see the module docs); `false` for the newest solvers.
    pub verified: bool,
}

use Algo::{Direct, Fft, Gemm, ImplicitGemm, Winograd};

const fn v(id: u32, name: &'static str, algo: Algo, tunable: bool, dynamic: bool) -> SolverInfo {
    SolverInfo {
        id,
        name,
        tunable,
        dynamic,
        algo,
        verified: true,
    }
}

const fn u(id: u32, name: &'static str, algo: Algo, tunable: bool, dynamic: bool) -> SolverInfo {
    SolverInfo {
        id,
        name,
        tunable,
        dynamic,
        algo,
        verified: false,
    }
}

/// Sorted by id; for ids 8 and 24 the verified (3.3) name comes first. Columns: id, name,
/// algorithm, tunable, dynamic.
#[rustfmt::skip]
static SOLVERS: &[SolverInfo] = &[
    v(1, "ConvAsm3x3U", Direct, true, false),
    v(2, "ConvAsm1x1U", Direct, true, false),
    v(3, "ConvAsm1x1UV2", Direct, true, false),
    v(5, "ConvAsm5x10u2v2f1", Direct, false, false),
    v(6, "ConvAsm5x10u2v2b1", Direct, false, false),
    v(7, "ConvAsm7x7c3h224w224k64u2v2p3q3f1", Direct, false, false),
    v(8, "ConvOclDirectFwd11x11", Direct, false, false),
    u(8, "ConvHipDirectFwd11x11", Direct, false, false),
    v(9, "ConvOclDirectFwdGen", Direct, false, false),
    v(11, "ConvOclDirectFwd", Direct, true, false),
    v(13, "ConvOclDirectFwd1x1", Direct, true, false),
    v(14, "ConvBinWinograd3x3U", Winograd, false, true),
    v(15, "ConvBinWinogradRxS", Winograd, false, true),
    v(16, "ConvAsmBwdWrW3x3", Direct, true, false),
    v(17, "ConvAsmBwdWrW1x1", Direct, true, false),
    v(18, "ConvOclBwdWrW2<1>", Direct, true, false),
    v(19, "ConvOclBwdWrW2<2>", Direct, true, false),
    v(20, "ConvOclBwdWrW2<4>", Direct, true, false),
    v(21, "ConvOclBwdWrW2<8>", Direct, true, false),
    v(22, "ConvOclBwdWrW2<16>", Direct, true, false),
    v(23, "ConvOclBwdWrW2NonTunable", Direct, false, false),
    v(24, "ConvOclBwdWrW53", Direct, false, false),
    u(24, "ConvHipBwdWrW53", Direct, false, false),
    v(25, "ConvOclBwdWrW1x1", Direct, false, false),
    v(26, "ConvHipImplicitGemmV4R1Fwd", ImplicitGemm, true, false),
    v(31, "ConvHipImplicitGemmV4R1WrW", ImplicitGemm, true, false),
    v(34, "fft", Fft, false, false),
    v(35, "ConvWinograd3x3MultipassWrW<3-4>", Winograd, false, true),
    v(37, "ConvBinWinogradRxSf3x2", Winograd, true, true),
    v(38, "ConvWinograd3x3MultipassWrW<3-5>", Winograd, false, true),
    v(39, "ConvWinograd3x3MultipassWrW<3-6>", Winograd, false, true),
    v(40, "ConvWinograd3x3MultipassWrW<3-2>", Winograd, false, true),
    v(41, "ConvWinograd3x3MultipassWrW<3-3>", Winograd, false, true),
    v(42, "ConvWinograd3x3MultipassWrW<7-2>", Winograd, false, true),
    v(43, "ConvWinograd3x3MultipassWrW<7-3>", Winograd, false, true),
    v(44, "ConvWinograd3x3MultipassWrW<7-2-1-1>", Winograd, false, true),
    v(45, "ConvWinograd3x3MultipassWrW<7-3-1-1>", Winograd, false, true),
    v(46, "ConvWinograd3x3MultipassWrW<1-1-7-2>", Winograd, false, true),
    v(47, "ConvWinograd3x3MultipassWrW<1-1-7-3>", Winograd, false, true),
    v(48, "ConvWinograd3x3MultipassWrW<5-3>", Winograd, false, true),
    v(49, "ConvWinograd3x3MultipassWrW<5-4>", Winograd, false, true),
    v(53, "ConvBinWinogradRxSf2x3", Winograd, true, true),
    v(54, "ConvHipImplicitGemmV4R4Fwd", ImplicitGemm, true, false),
    v(55, "ConvHipImplicitGemmBwdDataV1R1", ImplicitGemm, true, false),
    v(56, "ConvHipImplicitGemmBwdDataV4R1", ImplicitGemm, true, false),
    v(57, "ConvHipImplicitGemmBwdDataV1R1Xdlops", ImplicitGemm, true, false),
    v(60, "ConvHipImplicitGemmBwdDataV4R1Xdlops", ImplicitGemm, true, false),
    v(61, "ConvHipImplicitGemmV4R4WrW", ImplicitGemm, true, false),
    v(62, "ConvAsmImplicitGemmV4R1DynamicFwd", ImplicitGemm, false, true),
    v(63, "ConvAsmImplicitGemmV4R1DynamicFwd_1x1", ImplicitGemm, false, true),
    v(64, "ConvHipImplicitGemmForwardV4R4Xdlops", ImplicitGemm, true, false),
    v(65, "ConvAsmImplicitGemmV4R1DynamicBwd", ImplicitGemm, false, true),
    v(66, "ConvAsmImplicitGemmV4R1DynamicWrw", ImplicitGemm, false, true),
    v(67, "ConvMPBidirectWinograd<2-3>", Winograd, false, true),
    v(68, "ConvMPBidirectWinograd<3-3>", Winograd, false, true),
    v(69, "ConvMPBidirectWinograd<4-3>", Winograd, false, true),
    v(70, "ConvMPBidirectWinograd<5-3>", Winograd, false, true),
    v(71, "ConvMPBidirectWinograd<6-3>", Winograd, false, true),
    v(72, "ConvAsmImplicitGemmGTCDynamicWrwXdlops", ImplicitGemm, false, true),
    v(73, "ConvHipImplicitGemmWrwV4R4Xdlops", ImplicitGemm, true, false),
    v(74, "ConvAsmImplicitGemmGTCDynamicFwdXdlops", ImplicitGemm, false, true),
    v(75, "ConvMPBidirectWinograd_xdlops<2-3>", Winograd, true, false),
    v(76, "ConvMPBidirectWinograd_xdlops<3-3>", Winograd, true, false),
    v(77, "ConvMPBidirectWinograd_xdlops<4-3>", Winograd, true, false),
    v(78, "ConvMPBidirectWinograd_xdlops<5-3>", Winograd, true, false),
    v(79, "ConvMPBidirectWinograd_xdlops<6-3>", Winograd, true, false),
    v(80, "ConvHipImplicitGemmForwardV4R5Xdlops", ImplicitGemm, true, false),
    v(81, "ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm", ImplicitGemm, true, false),
    v(82, "ConvAsmImplicitGemmGTCDynamicBwdXdlops", ImplicitGemm, false, true),
    v(83, "ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm", ImplicitGemm, true, false),
    v(84, "ConvBinWinogradRxSf2x3g1", Winograd, false, true),
    v(85, "ConvDirectNaiveConvFwd", Direct, false, true),
    v(86, "ConvDirectNaiveConvBwd", Direct, false, true),
    v(87, "ConvDirectNaiveConvWrw", Direct, false, true),
    v(88, "GemmFwd1x1_0_1", Gemm, false, true),
    v(89, "GemmFwd1x1_0_1_int8", Gemm, false, true),
    v(90, "GemmFwd1x1_0_2", Gemm, false, true),
    v(91, "GemmFwdRest", Gemm, false, true),
    v(95, "GemmBwd1x1_stride2", Gemm, false, true),
    v(96, "GemmBwd1x1_stride1", Gemm, false, true),
    v(97, "GemmBwdRest", Gemm, false, true),
    v(98, "ConvMlirIgemmFwd", ImplicitGemm, true, false),
    v(99, "ConvMlirIgemmBwd", ImplicitGemm, true, false),
    v(100, "ConvMlirIgemmWrW", ImplicitGemm, true, false),
    v(101, "GemmWrw1x1_stride1", Gemm, false, true),
    v(102, "GemmWrwUniversal", Gemm, false, true),
    v(103, "ConvMlirIgemmFwdXdlops", ImplicitGemm, true, false),
    v(104, "ConvMlirIgemmBwdXdlops", ImplicitGemm, true, false),
    v(105, "ConvMlirIgemmWrWXdlops", ImplicitGemm, true, false),
    v(107, "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC", ImplicitGemm, true, true),
    v(108, "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC", ImplicitGemm, true, true),
    v(110, "ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC", ImplicitGemm, true, true),
    v(114, "ConvCkIgemmFwdV6r1DlopsNchw", ImplicitGemm, true, false),
    v(127, "ConvAsmImplicitGemmGTCDynamicFwdDlopsNCHWC", ImplicitGemm, true, true),
    v(128, "ConvHipImplicitGemmFwdXdlops", ImplicitGemm, true, true),
    v(129, "ConvHipImplicitGemmBwdXdlops", ImplicitGemm, true, true),
    v(137, "ConvHipImplicitGemmGroupFwdXdlops", ImplicitGemm, true, true),
    v(138, "ConvHipImplicitGemm3DGroupFwdXdlops", ImplicitGemm, true, true),
    v(139, "ConvWinoFuryRxS<2-3>", Winograd, false, true),
    v(140, "ConvHipImplicitGemm3DGroupWrwXdlops", ImplicitGemm, true, true),
    v(141, "ConvHipImplicitGemm3DGroupBwdXdlops", ImplicitGemm, true, true),
    v(149, "ConvHipImplicitGemmF16F8F16FwdXdlops", ImplicitGemm, true, true),
    v(150, "ConvHipImplicitGemmF16F8F16BwdXdlops", ImplicitGemm, true, true),
    v(151, "ConvHipImplicitGemmF16F8F16WrwXdlops", ImplicitGemm, true, true),
    v(155, "ConvHipImplicitGemmGroupBwdXdlops", ImplicitGemm, true, true),
    v(156, "ConvHipImplicitGemmGroupWrwXdlops", ImplicitGemm, true, true),
    u(180, "ConvWinoRageRxS<2-3>", Winograd, false, true),
    u(185, "ConvDepthwiseFwd2D", Direct, false, false),
    u(186, "TransposedConvBinWinograd3x3U", Winograd, false, true),
    u(187, "TransposedConvBinWinogradRxS", Winograd, false, true),
    u(188, "TransposedConvBinWinogradRxSf2x3g1", Winograd, false, true),
    u(189, "TransposedConvWinoFuryRxS<2-3>", Winograd, false, true),
    u(191, "TransposedConvMPBidirectWinograd<2-3>", Winograd, false, true),
    u(192, "TransposedConvMPBidirectWinograd<3-3>", Winograd, false, true),
    u(193, "TransposedConvMPBidirectWinograd<4-3>", Winograd, false, true),
    u(194, "TransposedConvMPBidirectWinograd<5-3>", Winograd, false, true),
    u(195, "TransposedConvMPBidirectWinograd<6-3>", Winograd, false, true),
    u(196, "TransposedConvWinograd3x3MultipassWrW<3-2>", Winograd, false, true),
    u(197, "TransposedConvWinograd3x3MultipassWrW<3-3>", Winograd, false, true),
    u(198, "TransposedConvWinograd3x3MultipassWrW<3-4>", Winograd, false, true),
    u(199, "TransposedConvWinograd3x3MultipassWrW<3-5>", Winograd, false, true),
    u(200, "TransposedConvWinograd3x3MultipassWrW<3-6>", Winograd, false, true),
    u(201, "TransposedConvWinograd3x3MultipassWrW<7-2>", Winograd, false, true),
    u(202, "TransposedConvWinograd3x3MultipassWrW<7-3>", Winograd, false, true),
    u(203, "TransposedConvWinograd3x3MultipassWrW<1-1-7-2>", Winograd, false, true),
    u(204, "TransposedConvWinograd3x3MultipassWrW<1-1-7-3>", Winograd, false, true),
    u(205, "TransposedConvWinograd3x3MultipassWrW<7-2-1-1>", Winograd, false, true),
    u(206, "TransposedConvWinograd3x3MultipassWrW<7-3-1-1>", Winograd, false, true),
    u(207, "TransposedConvWinograd3x3MultipassWrW<5-3>", Winograd, false, true),
    u(208, "TransposedConvWinograd3x3MultipassWrW<5-4>", Winograd, false, true),
    u(209, "TransposedConvBinWinoRxS<2-3>", Winograd, true, true),
    u(210, "TransposedConvBinWinoRxS<3-2>", Winograd, true, true),
    u(211, "TransposedConvMPBidirectWinograd_xdlops<2-3>", Winograd, true, false),
    u(212, "TransposedConvMPBidirectWinograd_xdlops<3-3>", Winograd, true, false),
    u(213, "TransposedConvMPBidirectWinograd_xdlops<4-3>", Winograd, true, false),
    u(214, "TransposedConvMPBidirectWinograd_xdlops<5-3>", Winograd, true, false),
    u(215, "TransposedConvMPBidirectWinograd_xdlops<6-3>", Winograd, true, false),
    u(216, "ConvDepthwiseFwd3D", Direct, false, false),
    u(217, "ConvHipDirectFwd", Direct, true, false),
];

/// Every convolution solver, verified (MIOpen 3.3) and newer (unverified), sorted by id.
pub fn all() -> &'static [SolverInfo] {
    SOLVERS
}

/// The solver with this `SolverDbId`.
pub fn by_name(name: &str) -> Option<&'static SolverInfo> {
    SOLVERS.iter().find(|s| s.name == name)
}

/// The solver with this id (the MIOpen 3.3 name for ids 8 and 24).
pub fn by_id(id: u32) -> Option<&'static SolverInfo> {
    SOLVERS.iter().find(|s| s.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Direction;
    use std::collections::HashSet;

    #[test]
    fn table_matches_the_reference_counts_and_is_consistent() {
        let verified: Vec<_> = all().iter().filter(|s| s.verified).collect();
        assert_eq!(verified.len(), 104);
        assert_eq!(all().len(), 104 + 35);
        let names: HashSet<_> = all().iter().map(|s| s.name).collect();
        assert_eq!(names.len(), all().len(), "names are unique");
        let ids: HashSet<_> = verified.iter().map(|s| s.id).collect();
        assert_eq!(ids.len(), 104, "verified ids are unique");
        assert!(all().windows(2).all(|w| w[0].id <= w[1].id));
        // Reserved ids never appear.
        for reserved in [
            10, 27, 28, 29, 30, 32, 33, 36, 50, 51, 52, 58, 59, 92, 93, 94,
        ] {
            assert!(by_id(reserved).is_none(), "id {reserved} is reserved");
        }
    }

    #[test]
    fn lookups_and_flags() {
        let s = by_name("ConvBinWinogradRxSf2x3").unwrap();
        assert_eq!(
            (s.id, s.tunable, s.dynamic, s.verified),
            (53, true, true, true)
        );
        assert_eq!(by_name("ConvOclBwdWrW2<4>").unwrap().id, 20);
        assert_eq!(
            by_name("ConvWinograd3x3MultipassWrW<7-2-1-1>").unwrap().id,
            44
        );
        assert_eq!(by_name("GemmFwdRest").unwrap().algo, Gemm);
        assert!(!by_name("ConvDirectNaiveConvFwd").unwrap().tunable);
        assert!(
            by_name("ConvHipImplicitGemmGroupWrwXdlops")
                .unwrap()
                .tunable
        );
        assert_eq!(by_id(8).unwrap().name, "ConvOclDirectFwd11x11");
        assert!(!by_name("ConvHipDirectFwd11x11").unwrap().verified);
        assert_eq!(by_name("fft").unwrap().algo, Fft);
        assert!(by_name("NoSuchSolver").is_none());
        assert_eq!(
            ImplicitGemm.directional_name(Direction::BackwardData),
            "miopenConvolutionBwdDataAlgoImplicitGEMM"
        );
        assert_eq!(
            Direct.directional_name(Direction::Forward),
            "miopenConvolutionFwdAlgoDirect"
        );
        // Solvers seen in the shipped databases (§2.1, §3.2) are all known.
        for name in [
            "ConvAsm1x1U",
            "ConvAsm1x1UV2",
            "ConvAsm3x3U",
            "ConvAsmBwdWrW1x1",
            "ConvAsmBwdWrW3x3",
            "ConvBinWinogradRxSf3x2",
            "ConvHipImplicitGemmV4R1Fwd",
            "ConvHipImplicitGemmV4R4Fwd",
            "ConvMlirIgemmFwd",
            "ConvOclBwdWrW2<1>",
            "ConvOclDirectFwd",
            "ConvOclDirectFwd1x1",
            "ConvCkIgemmFwdV6r1DlopsNchw",
            "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC",
            "ConvHipImplicitGemmFwdXdlops",
            "GemmBwd1x1_stride1",
            "ConvBinWinogradRxSf2x3g1",
            "ConvDirectNaiveConvFwd",
            "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC",
            "ConvMlirIgemmFwdXdlops",
            "ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm",
        ] {
            assert!(by_name(name).is_some_and(|s| s.verified), "{name}");
        }
    }
}
