"""q/k projection weight layouts: interleaved (pairs 2i, 2i+1) and half-split (pairs i, i+d/2)."""
