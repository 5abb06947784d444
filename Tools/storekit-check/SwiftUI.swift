// Stand-in for the part of SwiftUI the StoreKit guide's snippets use (an `App` with a
// `WindowGroup`), so they type-check on Linux with the StoreKit layer (Tools/storekit-check.sh).
// Written from Apple's documentation of each, under developer.apple.com/documentation/swiftui/.

// view: `protocol View`, with `associatedtype Body : View` and `@ViewBuilder var body: Body`.
@MainActor
public protocol View {
    associatedtype Body: View
    @ViewBuilder var body: Body { get }
}

extension Never: View {
    public var body: Never { fatalError() }
}

// emptyview: `struct EmptyView`.
public struct EmptyView: View {
    public init() {}
    public var body: Never { fatalError() }
}

// viewbuilder: `@resultBuilder struct ViewBuilder`.
@resultBuilder
public enum ViewBuilder {
    public static func buildBlock<Content: View>(_ content: Content) -> Content { content }
}

// scene: `protocol Scene`; scenebuilder: `@resultBuilder struct SceneBuilder`.
@MainActor
public protocol Scene {}

@resultBuilder
public enum SceneBuilder {
    public static func buildBlock<Content: Scene>(_ content: Content) -> Content { content }
}

// windowgroup: `struct WindowGroup<Content> where Content : View`, `init(@ViewBuilder content: () -> Content)`.
public struct WindowGroup<Content: View>: Scene {
    public init(@ViewBuilder content: () -> Content) {}
}

// app: `protocol App`, with `init()`, `@SceneBuilder var body: Body`, and `static func main()` for `@main`.
@MainActor
public protocol App {
    associatedtype Body: Scene
    init()
    @SceneBuilder var body: Body { get }
}

extension App {
    public static func main() {}
}
