-- Shoal: one MariaDB/MySQL user per role, with only the table privileges that role needs.
-- Generated from scripts/lib/services.sh (shoal_role_db_grants), the same grants scripts/services-up
-- sets on a development machine and scripts/check-privileges proves. Replace before running:
--   CLUSTER_NET            the hosts the workers connect from, e.g. 10.0.0.% (never %)
--   <ROLE>_DB_PASSWORD     one random password per role, e.g. openssl rand -hex 24
-- Run as root (mariadb -uroot < roles.sql) after the schema exists: `shoal db migrate` as the
-- admin/migrator user first (table grants name existing tables). Never grant these to %.
-- INSERT ... ON DUPLICATE KEY UPDATE needs UPDATE on every column it inserts: hence UPDATE on
-- the tables the loaders upsert, and UPDATE (columns) on job for the cli (not attempt, lease,
-- worker, artifact, failure or timestamps; state is among the inserted columns).
-- Every worker role writes its own presence row in `worker` (an upsert: MariaDB wants SELECT on
-- the columns it updates); the cli reads them (`shoal workers`).
-- Every role reads and may "create" schema_version because every shoal process migrates on start
-- (with the schema current that is one CREATE TABLE IF NOT EXISTS schema_version).

-- The admin/migrator (runs shoal db migrate; not used by workers).
CREATE USER IF NOT EXISTS 'shoal'@'CLUSTER_NET' IDENTIFIED BY 'ADMIN_DB_PASSWORD';
GRANT ALL PRIVILEGES ON `shoal`.* TO 'shoal'@'CLUSTER_NET';
-- Earlier versions of this file created 'shoal'@'%': drop it once the above works.
-- DROP USER IF EXISTS 'shoal'@'%';

-- scheduler
CREATE USER IF NOT EXISTS 'shoal_scheduler'@'CLUSTER_NET' IDENTIFIED BY 'SCHEDULER_DB_PASSWORD';
GRANT SELECT, CREATE ON `shoal`.`schema_version` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`session` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`config` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT SELECT, UPDATE ON `shoal`.`job` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`label` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT INSERT ON `shoal`.`result` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`build` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT SELECT, INSERT, DELETE ON `shoal`.`outbox` TO 'shoal_scheduler'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`worker` TO 'shoal_scheduler'@'CLUSTER_NET';

-- compile
CREATE USER IF NOT EXISTS 'shoal_compile'@'CLUSTER_NET' IDENTIFIED BY 'COMPILE_DB_PASSWORD';
GRANT SELECT, CREATE ON `shoal`.`schema_version` TO 'shoal_compile'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`session` TO 'shoal_compile'@'CLUSTER_NET';
GRANT SELECT (hash), INSERT, UPDATE ON `shoal`.`artifact` TO 'shoal_compile'@'CLUSTER_NET';
GRANT SELECT (id, state, attempt) ON `shoal`.`job` TO 'shoal_compile'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`worker` TO 'shoal_compile'@'CLUSTER_NET';

-- eval
CREATE USER IF NOT EXISTS 'shoal_eval'@'CLUSTER_NET' IDENTIFIED BY 'EVAL_DB_PASSWORD';
GRANT SELECT, CREATE ON `shoal`.`schema_version` TO 'shoal_eval'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`session` TO 'shoal_eval'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`job` TO 'shoal_eval'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`label` TO 'shoal_eval'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`artifact` TO 'shoal_eval'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`worker` TO 'shoal_eval'@'CLUSTER_NET';

-- exporter
CREATE USER IF NOT EXISTS 'shoal_exporter'@'CLUSTER_NET' IDENTIFIED BY 'EXPORTER_DB_PASSWORD';
GRANT SELECT, CREATE ON `shoal`.`schema_version` TO 'shoal_exporter'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`session` TO 'shoal_exporter'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`job` TO 'shoal_exporter'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`label` TO 'shoal_exporter'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`config` TO 'shoal_exporter'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`solver` TO 'shoal_exporter'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`result` TO 'shoal_exporter'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`worker` TO 'shoal_exporter'@'CLUSTER_NET';

-- cli
CREATE USER IF NOT EXISTS 'shoal_cli'@'CLUSTER_NET' IDENTIFIED BY 'CLI_DB_PASSWORD';
GRANT SELECT, CREATE ON `shoal`.`schema_version` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT, INSERT ON `shoal`.`session` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`config` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`config_tag` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`solver` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE ON `shoal`.`applicability` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT, INSERT, UPDATE (id, session_id, config_id, solver_id, compile_step, eval_step, identity_hash, compile_params, run_params, build_key, state, created_ms, updated_ms) ON `shoal`.`job` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`result` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`label` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`artifact` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`worker` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`db_import` TO 'shoal_cli'@'CLUSTER_NET';
GRANT SELECT ON `shoal`.`db_record` TO 'shoal_cli'@'CLUSTER_NET';
