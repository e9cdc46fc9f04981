"""The DiLoCo family: local AdamW steps, then an outer step on the averaged
pseudo-gradient (DiLoCo, AutoLoCo), with interval controllers choosing ``H``
and streaming, overlapped or compressed syncs."""
