"""Reports tell: the verdict collector (xdist controller only), the versioned JSON and the HTML page."""
