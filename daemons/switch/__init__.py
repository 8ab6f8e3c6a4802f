"""gsn-switch: N ports joined into one GSN fabric."""
