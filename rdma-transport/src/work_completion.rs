//! What a verbs work completion says, in words: its status's name, and which verbs of a run a
//! failed completion leaves executed. Pure, so it is tested without a device.

/// The name of work-completion status `status` (`enum ibv_wc_status`).
pub fn status_name(status: u32) -> &'static str {
    const NAMES: [&str; 24] = [
        "IBV_WC_SUCCESS",
        "IBV_WC_LOC_LEN_ERR",
        "IBV_WC_LOC_QP_OP_ERR",
        "IBV_WC_LOC_EEC_OP_ERR",
        "IBV_WC_LOC_PROT_ERR",
        "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_MW_BIND_ERR",
        "IBV_WC_BAD_RESP_ERR",
        "IBV_WC_LOC_ACCESS_ERR",
        "IBV_WC_REM_INV_REQ_ERR",
        "IBV_WC_REM_ACCESS_ERR",
        "IBV_WC_REM_OP_ERR",
        "IBV_WC_RETRY_EXC_ERR",
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "IBV_WC_LOC_RDD_VIOL_ERR",
        "IBV_WC_REM_INV_RD_REQ_ERR",
        "IBV_WC_REM_ABORT_ERR",
        "IBV_WC_INV_EECN_ERR",
        "IBV_WC_INV_EEC_STATE_ERR",
        "IBV_WC_FATAL_ERR",
        "IBV_WC_RESP_TIMEOUT_ERR",
        "IBV_WC_GENERAL_ERR",
        "IBV_WC_TM_ERR",
        "IBV_WC_TM_RNDV_INCOMPLETE",
    ];
    NAMES
        .get(status as usize)
        .copied()
        .unwrap_or("an unknown status")
}

/// Why a batch failed, from its failing completion.
pub fn failure(wr_id: u64, status: u32, vendor_err: u32) -> String {
    format!(
        "work request {wr_id} completed with {} (status {status}, vendor error {vendor_err:#x})",
        status_name(status)
    )
}

/// The place of work request `wr_id` in a run of `len` requests whose last is `last_wr` (ids
/// count up by one along a run and wrap), if it is one of them: an RC queue pair executes a
/// run in order, so the requests before a failed one executed and their results are whole.
pub fn position_in_run(last_wr: u64, len: usize, wr_id: u64) -> Option<usize> {
    let back = usize::try_from(last_wr.wrapping_sub(wr_id)).ok()?;
    (back < len).then(|| len - 1 - back)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_named_and_failures_carry_the_vendor_error() {
        assert_eq!(status_name(0), "IBV_WC_SUCCESS");
        assert_eq!(status_name(10), "IBV_WC_REM_ACCESS_ERR");
        assert_eq!(status_name(12), "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(status_name(99), "an unknown status");
        let why = failure(41, 10, 0x88);
        assert!(
            why.contains("IBV_WC_REM_ACCESS_ERR") && why.contains("0x88") && why.contains("41")
        );
    }

    #[test]
    fn a_failed_request_s_place_in_its_run_is_found_across_the_wrap() {
        assert_eq!(position_in_run(10, 4, 7), Some(0));
        assert_eq!(position_in_run(10, 4, 10), Some(3));
        assert_eq!(position_in_run(10, 4, 6), None);
        assert_eq!(position_in_run(10, 4, 11), None);
        // A run whose ids wrapped past u64::MAX.
        assert_eq!(position_in_run(1, 3, u64::MAX), Some(0));
        assert_eq!(position_in_run(1, 3, 0), Some(1));
    }
}
