"""The single exception class of the flows package."""


class FlowError(ValueError):
    """Bad input or a failed premise of the Kumar–Haupt theory (THEORY §5).

    The message always names the offending parameter and says how to fix it.
    """
