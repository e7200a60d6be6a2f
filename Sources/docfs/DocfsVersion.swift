/// The version `docfs --version` prints.
enum DocfsVersion {
    static let number = "0.20.0"
}
