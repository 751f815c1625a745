"""OpenCL back end (filled by issue 4)."""
