"""The tools Stockade ships: the file tools and the command tools (through the sandbox), the
raw host-file tools (off unless added), and the tools a toolkit makes itself (``reset_tools``,
the finish function, the skill viewer).

Nothing here imports the toolkit: what these tools need of one is `ToolCatalog`.
"""

from stockade.engine.builtin.files import FILE_TOOLS, add_file_tools
from stockade.engine.builtin.host_files import add_raw_text_tools
from stockade.engine.builtin.shell import SHELL_TOOLS, add_shell_tools

__all__ = ["FILE_TOOLS", "SHELL_TOOLS", "add_file_tools", "add_raw_text_tools", "add_shell_tools"]
