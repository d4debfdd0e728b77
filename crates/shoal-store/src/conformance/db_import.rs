//! Conformance cases for imported MIOpen databases (`crate::db_import`): written whole or not at
//! all, read back exactly and in order, listed with their counts.

use super::*;
use crate::{DbRecord, DbValue, NewDbImport};

fn import(label: &str) -> NewDbImport {
    NewDbImport {
        label: label.to_string(),
        arch: "gfx942".to_string(),
        num_cu: 304,
        files: vec![
            "gfx942130.HIP.fdb.txt".to_string(),
            "gfx942130.db".to_string(),
        ],
        created_ms: 1_700_000_000_000,
    }
}

fn find(config: Option<ConfigId>, key: &str, solver: &str, time_ms: f32) -> DbRecord {
    DbRecord {
        config,
        key: key.to_string(),
        solver: solver.to_string(),
        value: DbValue::Find {
            time_ms,
            workspace: 13_714_688,
            algorithm: "miopenConvolutionBwdDataAlgoImplicitGEMM".to_string(),
        },
    }
}

fn perf(config: Option<ConfigId>, key: &str, solver: &str, params: &str) -> DbRecord {
    DbRecord {
        config,
        key: key.to_string(),
        solver: solver.to_string(),
        value: DbValue::Perf {
            params: params.to_string(),
        },
    }
}

/// An import's records come back exactly as given (f32 times to the bit, the largest workspace
/// a store keeps, params with MIOpen's odd characters, a perf key tied to no config) and in
/// their order, also past one bulk request of rows; imports are listed oldest first with their
/// counts; a refused record or an unknown config writes nothing.
pub async fn database_imports_are_stored_whole_and_read_back_in_order(store: &dyn Store) {
    let w = world(store).await;
    let key = "1000-13-13-1x1-512-13-13-16-0x0-1x1-1x1-0-NCHW-FP16-B";
    let pkey = "2x1000x13x13x1x1x1x1x512x16x0x0x0x1x1x0x1x1x0x0x1xNCHWxFP16xB";
    let mut records = vec![
        find(
            Some(w.config),
            key,
            "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC",
            0.051639,
        ),
        DbRecord {
            value: DbValue::Find {
                time_ms: 0.0863205,
                workspace: i64::MAX as u64,
                algorithm: "miopenConvolutionBwdDataAlgoGEMM".to_string(),
            },
            ..find(Some(w.config), key, "GemmBwd1x1_stride1", 0.0)
        },
        perf(
            Some(w.config),
            pkey,
            "ConvHipImplicitGemmFwdXdlops",
            "DeviceConv2dFwdXdl<256, 128, 64, 4, Default>[2]",
        ),
        perf(
            None,
            "3x256x56x56x16x1x1x1x512x4x0x0x0x2x2x2x1x1x1x0x1xNCDHWxFP32xB",
            "S",
            "1",
        ),
    ];
    // Enough rows, with long enough params, to take more than one bulk request (1 MiB).
    for i in 0..4000 {
        let params = format!("{i},{}", "7".repeat(400));
        records.push(perf(Some(w.config), pkey, &format!("Solver{i}"), &params));
    }
    let first = store
        .create_db_import(&import("shipped"), &records)
        .await
        .unwrap();
    assert_eq!(store.db_records(first).await.unwrap(), records);

    let second = store
        .create_db_import(&import("again"), &records[..1])
        .await
        .unwrap();
    assert_ne!(first, second);
    assert_eq!(store.db_records(second).await.unwrap(), records[..1]);
    let listed = store.db_imports().await.unwrap();
    let summary: Vec<_> = listed
        .iter()
        .map(|i| {
            (
                i.id,
                i.info.clone(),
                i.find_records,
                i.perf_records,
                i.configs,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (first, import("shipped"), 2, 4002, 1),
            (second, import("again"), 1, 0, 1),
        ]
    );

    // Refused before writing: a time no store keeps exactly, a config that does not exist.
    let nan = vec![records[0].clone(), find(None, key, "X", f32::NAN)];
    assert_invalid(store.create_db_import(&import("nan"), &nan).await);
    let unknown = vec![
        records[0].clone(),
        find(Some(ConfigId(999_999)), key, "X", 1.0),
    ];
    assert!(store
        .create_db_import(&import("unknown config"), &unknown)
        .await
        .is_err());
    assert_eq!(
        store.db_imports().await.unwrap().len(),
        2,
        "nothing written"
    );
    assert!(store
        .db_records(crate::DbImportId(999_999))
        .await
        .unwrap()
        .is_empty());
}
