"""Sans-IO GSN link layer."""
