//! One conformance suite, run against both backends: the same behaviour is required of the
//! embedded SQLite store, of PostgreSQL and of a Citus cluster (PostgreSQL distributed over a
//! coordinator and two workers). PostgreSQL and Citus run when the suite started them
//! (GPULENS_TEST_PG, GPULENS_TEST_CITUS, see tests/run.sh); otherwise those tests say they skip.

mod ingest;
mod records;
mod rollups;
mod sealing;
use test_support::stores as support;

use ingest::*;
use records::*;
use rollups::*;
use sealing::*;

use model::time::now_ms;
use store::rollup::{HOUR_MS, bucket_of};

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let t = crate::support::sqlite().await;
                    super::$name(&t.store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(t) = crate::support::postgres().await {
                        super::$name(&t.store).await;
                    }
                }
            )*
        }
        mod citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(t) = crate::support::citus().await {
                        super::$name(&t.store).await;
                    }
                }
            )*
        }
    };
}

conformance!(
    stores_batches_and_lists_inventory,
    replays_are_stored_once,
    concurrent_batches_are_each_stored_once,
    rollups_match_raw_data,
    a_moment_sent_again_counts_once,
    an_hour_rolled_up_in_pieces_is_its_minutes_merged,
    interference_minutes_are_the_wanted_slice_of_minute_rollups,
    series_use_the_right_resolution,
    retention_drops_old_data_per_resolution,
    missing_measurements_stay_null,
    alert_state_and_outbox_round_trip,
    remote_write_journal_keeps_what_waits,
    sealed_samples_answer_as_rows_did,
    a_backlog_of_rows_seals_in_steps,
    waiting_episodes_are_kept_current_and_read_by_overlap,
    reclaim_cases_move_once_and_keep_their_trail,
    pair_hours_are_kept_per_node_hour,
    a_uid_past_2_31_reads_back,
    a_tenant_is_first_seen_at_its_first_sample,
    use_hours_are_the_tenant_hours_summed,
);

pub(crate) fn hour_ago(hours: i64) -> i64 {
    bucket_of(now_ms(), HOUR_MS) - hours * HOUR_MS
}
