VALUE = "sibling-imported"
