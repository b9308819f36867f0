"""FLOPs and bytes of recorded operators (``formulas``), device peaks (``peaks``), the summary's ``flops`` section (``costs``)."""
