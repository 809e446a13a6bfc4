"""``python -m codemods``: regenerate ``codemods/_triggers.py`` from the rule classes."""

from pathlib import Path

from codemods import trigger_table_source

path = Path(__file__).with_name("_triggers.py")
text = trigger_table_source()
if path.exists() and path.read_text() == text:
    print(f"{path}: up to date")
else:
    path.write_text(text)
    print(f"{path}: written")
