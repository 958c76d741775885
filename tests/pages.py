"""Reading rendered pages in tests: a small element tree over html.parser (never matching whole
pages), and the hostile string every page must escape."""

from __future__ import annotations

from html.parser import HTMLParser

EVIL = "<script>alert(1)</script> & more"


# --- a small element tree over html.parser ---------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        def matches(node: Node) -> bool:
            if tag and node.tag != tag:
                return False
            for key, value in attrs.items():
                key = key.rstrip("_")
                if key == "class":
                    if value not in (node.attrs.get("class") or "").split():
                        return False
                elif node.attrs.get(key) != value:
                    return False
            return True

        return [n for n in self.iter() if matches(n)]

    def find(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag or '*'} {attrs}> in <{self.tag} id={self.attrs.get('id')}>"
        return found[0]


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag):
        node = self.current
        while node is not self.root and node.tag != tag:
            node = node.parent
        assert node is not self.root, f"stray </{tag}>"
        self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse(html: str) -> Node:
    builder = TreeBuilder()
    builder.feed(html)
    builder.close()
    assert builder.current is builder.root, f"unclosed <{builder.current.tag}>"
    return builder.root


def words(node: Node) -> str:
    return " ".join(node.text().split())
