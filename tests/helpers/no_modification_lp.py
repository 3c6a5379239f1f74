"""The no-modification LP's optimum of a proofs_check instance (HiGHS, CLARABEL where HiGHS
reports a tiny-mass instance infeasible)."""

from spectr_gbv.oracle.programs import no_modification_lp


def lp_optimum(inst):
    res = no_modification_lp(inst.draft.block_law(inst.L), inst.target.block_law(inst.L), inst.K,
                             return_coupling=False)
    if res.status != "optimal":  # HiGHS reports some instances with ~1e-25 masses infeasible
        res = no_modification_lp(inst.draft.block_law(inst.L), inst.target.block_law(inst.L), inst.K,
                                 return_coupling=False, solver="CLARABEL")
        assert res.status == "optimal", res
    return res.optimum
