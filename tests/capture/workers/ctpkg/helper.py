VALUE = "relative-import-ok"
