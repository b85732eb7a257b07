"""eval-ppl, eval-passkey, recommend and the eval task registry."""
