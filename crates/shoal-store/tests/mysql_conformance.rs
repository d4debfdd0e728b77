//! The shared Store conformance suite, run against a `MysqlStore` on a fresh database per case.
//!
//! The server is `SHOAL_TEST_MYSQL` (a URL without a database; default
//! `mysql://root@127.0.0.1:3306`). Each case creates `shoal_t_<pid>_<n>`, migrates it, and drops
//! it when done ([`shoal_store::mysql::ScratchDb`]).

use shoal_store::mysql::ScratchDb;
use shoal_store::Store;

shoal_store::store_conformance_tests!(async {
    let db = ScratchDb::new("shoal_t")
        .await
        .expect("a scratch MySQL database");
    db.migrate().await.expect("migrate");
    db
});
