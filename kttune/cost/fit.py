"""The cost model's curve fits: non-negative least squares on relative error and log-log
interpolation. They live in `kttune.hw.fit`, beside the curve kinds they fit, so that deriving a
profile (kttune.hw.derive) splits each measured curve into its fixed and scaling parts with the same
fit the cost model uses; this module names them for the cost model."""

from kttune.hw.fit import LinearFit, fit_nonneg, interp_loglog

__all__ = ["LinearFit", "fit_nonneg", "interp_loglog"]
