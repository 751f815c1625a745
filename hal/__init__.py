"""Hardware abstraction layer: device-independent interfaces (filled by issue 3)."""
