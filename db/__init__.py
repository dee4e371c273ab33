"""preflab.db: the data model, migrations, import, pairs, agreement and export."""
